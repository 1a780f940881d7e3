// Package launch starts one host's processes of a collbench world: it
// wires each process's rank, world size, local rank, rendezvous address and
// job secret, streams their output (rank 0's as it is, the others' with
// their rank before each line), never lets them outlive it, and when one
// fails says how every rank ended and names the cause they agree on.
package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"collbench/bootstrap"
	"collbench/internal/secret"
	"collbench/internal/tempdir"
	"collbench/internal/words"
)

// Config is one host's share of a world.
type Config struct {
	Procs  int      // processes on this host
	Nodes  int      // simulated hosts they are split into (NCCL_HOSTID)
	Port   int      // rendezvous port on 127.0.0.1; 0 for a free one
	Args   []string // the collbench command each process runs
	Binary string   // the collbench to start; this executable when ""
	// NNodes, NodeRank and RootAddr join this host's processes to those
	// that launch starts on other hosts: node r's process i is world rank
	// r*Procs+i, and rank 0 serves the rendezvous at RootAddr.
	NNodes   int
	NodeRank int
	RootAddr string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// Stdout receives rank 0's standard output; Stderr everything else.
	Stdout, Stderr io.Writer
	// CheckArgs, if set, checks the command to start once, before any
	// process starts, so a typo fails once rather than in every process.
	CheckArgs func(args []string) error
	// SignalOf, if set, says which signal cancelled ctx (nil when none did).
	SignalOf func(ctx context.Context) os.Signal
}

// codeRunFailed is a rank's exit code when waiting for it failed: collbench's
// "the run could not complete".
const codeRunFailed = 3

// PlanError is a configuration that cannot run: a usage error.
type PlanError struct{ Err error }

func (e *PlanError) Error() string { return e.Err.Error() }
func (e *PlanError) Unwrap() error { return e.Err }

func planErrorf(format string, a ...any) error { return &PlanError{fmt.Errorf(format, a...)} }

// Stopped says launch was told to stop (ctx cancelled) and passed the
// signal on to every process.
type Stopped struct{ Signal os.Signal }

func (e *Stopped) Error() string { return "launch was stopped" }

// ExitError carries the exit code of the rank at fault (or 128 + the
// signal that killed it); what happened was already said on Stderr.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("a rank exited with code %d", e.Code) }

// WriteReport leaves this rank's fault for the launcher that started it
// (when it did: bootstrap.EnvReports is set), so the launcher can name the cause.
func WriteReport(getenv func(string) string, err error) {
	dir := getenv(bootstrap.EnvReports)
	var pe *bootstrap.PeerError
	if dir == "" || !errors.As(err, &pe) {
		return
	}
	b, _ := json.Marshal(pe)
	_ = os.WriteFile(filepath.Join(dir, "rank-"+getenv(bootstrap.EnvRank)+".json"), b, 0o644) //nolint:gosec // the fault report is read by the launcher, possibly another user's process
}

// PlanOf checks cfg and resolves its multi-node settings from cfg or the
// cluster's variables, as Run would.
func PlanOf(cfg Config) (Plan, error) { return cfg.plan() }

// Procs is how many processes the plan starts on this host.
func (p Plan) Procs() int { return p.procs }

// Run starts this host's processes of the world cfg describes, streams
// their output and waits for them. It returns nil when every process
// exited 0; a *PlanError for a configuration that cannot run; a *Stopped
// when ctx was cancelled (a signal: every process got it too); an
// *ExitError when a process failed, after saying how every rank ended and
// naming the cause the ranks agree on; any other error when launch itself
// could not start them.
func Run(ctx context.Context, o Config) error {
	if ctx == nil {
		ctx = context.Background()
	}
	plan, err := o.plan()
	if err != nil {
		return err
	}
	bin, err := o.prepare(&plan)
	if err != nil {
		return err
	}
	// The children are started from this locked thread and get SIGKILL
	// when it goes away, so they never outlive the launcher.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Ranks that stop on a fault leave their verdict here, so the launcher
	// can name the cause they agree on rather than the first echo of it.
	reports, release, err := tempdir.Make("collbench-launch-")
	if err != nil {
		return fmt.Errorf("making the launch report directory: %w", err)
	}
	defer release()
	plan.host, _ = os.Hostname()
	plan.reports = reports
	start := time.Now()
	children, err := startRanks(bin, o, plan)
	if err != nil {
		return err
	}
	ended := make(chan *child, plan.procs)
	for _, ch := range children {
		go func() {
			err := ch.cmd.Wait()
			ch.at = time.Since(start)
			if ee, ok := err.(*exec.ExitError); ok {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					ch.signal = ws.Signal()
				} else {
					ch.code = ee.ExitCode()
				}
			} else if err != nil {
				ch.code = codeRunFailed
			}
			close(ch.done)
			ended <- ch
		}()
	}
	signalAll := func(sig syscall.Signal, byUs bool) {
		for _, ch := range children {
			select {
			case <-ch.done:
			default:
				if byUs {
					ch.killedByLaunch = true
				}
				_ = syscall.Kill(-ch.cmd.Process.Pid, sig) // its whole process group
			}
		}
	}
	// Exiting at once (a second signal) still ends the ranks first, and
	// waits a little for them, so no rank writes its report into the
	// directory as it is removed (the exit cleanups run latest first).
	allDone := make(chan struct{})
	go func() {
		for _, ch := range children {
			<-ch.done
		}
		close(allDone)
	}()
	defer tempdir.EndOnExit(func() { signalAll(syscall.SIGKILL, true) }, allDone)()
	var grace <-chan time.Time
	var first *child
	var stopSig os.Signal
	left := len(children)
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for left > 0 {
		select {
		case ch := <-ended:
			left--
			if ch.failed() && first == nil && !ch.killedByLaunch {
				first = ch
				// The others notice a failed rank themselves; stragglers
				// are stopped after a grace period.
				if grace == nil {
					grace = time.After(30 * time.Second)
				}
			}
		case <-ctx.Done():
			if stopSig != nil {
				signalAll(syscall.SIGKILL, true) // a second signal: stop now
				continue
			}
			stopSig = os.Interrupt
			sig, bySignal := syscall.SIGINT, false
			if o.SignalOf != nil {
				if s, ok := o.SignalOf(ctx).(syscall.Signal); ok {
					stopSig, sig, bySignal = s, s, true
				}
			}
			signalAll(sig, false)
			grace = time.After(10 * time.Second)
			ctx = context.Background()
			if bySignal {
				// A second signal to the launcher kills the ranks at once.
				again := make(chan os.Signal, 1)
				signal.Notify(again, os.Interrupt, syscall.SIGTERM)
				defer signal.Stop(again)
				go func() {
					<-again
					signalAll(syscall.SIGKILL, true)
				}()
			}
		case <-poll.C:
			// A rank stopped by a signal (SIGSTOP) never ends by itself:
			// once every other rank has ended, stop it.
			if first != nil && allStoppedOrDone(children) {
				signalAll(syscall.SIGKILL, true)
			}
		case <-grace:
			signalAll(syscall.SIGKILL, true)
			grace = nil
		}
	}
	for _, ch := range children {
		for _, w := range []io.Writer{ch.cmd.Stdout, ch.cmd.Stderr} {
			w.(*lineWriter).flush()
		}
	}
	if stopSig != nil {
		// Launch itself was told to stop: it exits as the signal says
		// (130 or 143), whatever its ranks answered (a rank stopped by a
		// peer's abort reports an interruption), and names no rank as if
		// it were at fault.
		return &Stopped{Signal: stopSig}
	}
	return verdict(o.Stderr, children, first, reports)
}

// prepare completes plan before any rank starts: the binary the ranks
// run, the rendezvous address (a free port where none is given; a --port
// on this host is tried first, so one that rank 0 could not serve is
// refused at once rather than after the ranks' bootstrap bound), and the
// job's secret.
func (o Config) prepare(plan *Plan) (string, error) {
	bin := o.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding collbench's own executable: %w", err)
		}
		bin = exe
	}
	switch {
	case plan.rootAddr == "":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("finding a free port: %w", err)
		}
		plan.rootAddr = ln.Addr().String()
		ln.Close()
	case plan.nnodes <= 1 && o.Port > 0:
		ln, err := net.Listen("tcp", plan.rootAddr)
		if err != nil {
			return "", planErrorf("--port %d: rank 0 cannot serve the rendezvous there: %s, or leave --port out for a free one", o.Port, bootstrap.ListenReason(err))
		}
		ln.Close()
	}
	// Only this job's ranks can join: they share a secret made here (or
	// the one the environment already gives; across hosts it must).
	plan.token = o.getenv(secret.EnvToken)
	if plan.token == "" && plan.nnodes == 1 {
		var err error
		if plan.token, err = secret.New(); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// startRanks starts the plan's processes, each in a process group of its
// own that gets SIGKILL when the launcher's thread goes away; rank 0's
// output passes through, the others' lines on stderr with their rank.
func startRanks(bin string, o Config, plan Plan) ([]*child, error) {
	var children []*child
	var outMu sync.Mutex
	said := map[string]bool{}
	for r := 0; r < plan.procs; r++ {
		cmd := exec.Command(bin, o.Args...) //nolint:gosec // G204: collbench itself (or the binary the user named), with the user's own arguments
		cmd.Env = append(os.Environ(), plan.Env(r)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		ch := &child{rank: r, cmd: cmd, done: make(chan struct{})}
		// exec copies the streams itself and Wait returns only once they
		// are drained, so no line of a rank that ended is lost.
		if r == 0 {
			cmd.Stdout = &lineWriter{mu: &outMu, dst: o.Stdout}
			cmd.Stderr = &lineWriter{mu: &outMu, dst: o.Stderr, said: said}
		} else {
			prefix := fmt.Sprintf("[rank %d] ", r)
			cmd.Stdout = &lineWriter{mu: &outMu, dst: o.Stderr, prefix: prefix}
			cmd.Stderr = &lineWriter{mu: &outMu, dst: o.Stderr, prefix: prefix, said: said}
		}
		if err := cmd.Start(); err != nil {
			for _, c := range children {
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
			return nil, fmt.Errorf("starting rank %d: %w", r, err)
		}
		children = append(children, ch)
	}
	return children, nil
}

// verdict names the rank at fault once every rank ended: the cause the
// ranks' reports agree on, else the first that failed, and how each ended;
// its error carries that rank's exit code (nil when none failed).
func verdict(stderr io.Writer, children []*child, first *child, reports string) error {
	if first == nil {
		for _, ch := range children {
			if ch.failed() && !ch.killedByLaunch {
				first = ch
				break
			}
		}
	}
	if first == nil {
		return nil
	}
	code := first.exitCode()
	if cause, namedBy := agreedCause(reports); cause != nil && cause.Rank >= 0 && cause.Rank < len(children) {
		culprit := children[cause.Rank]
		if culprit.failed() && !culprit.killedByLaunch {
			first, code = culprit, culprit.exitCode()
		} else {
			// The rank at fault comes first even when launch had to stop
			// it (it was frozen or hung); the code is its peers' verdict.
			first = culprit
		}
		fmt.Fprintf(stderr, "collbench launch: the cause: %s (named by %s)\n", cause.Msg, ranksNoun(namedBy))
	}
	reportEnds(stderr, children, first)
	return &ExitError{Code: code}
}

// agreedCause reads the ranks' reports and returns the fault most of them
// name (rank 0's on a tie) and which ranks named it.
func agreedCause(dir string) (*bootstrap.PeerError, []int) {
	entries, _ := os.ReadDir(dir)
	type vote struct {
		pe *bootstrap.PeerError
		by []int
	}
	votes := map[int]*vote{}
	for _, e := range entries {
		r, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(e.Name(), "rank-"), ".json"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		var pe bootstrap.PeerError
		if err != nil || json.Unmarshal(b, &pe) != nil || pe.Msg == "" || pe.Rank < 0 {
			continue
		}
		v, ok := votes[pe.Rank]
		if !ok {
			v = &vote{pe: &pe}
			votes[pe.Rank] = v
		}
		v.by = append(v.by, r)
	}
	var best *vote
	for _, v := range votes {
		slices.Sort(v.by)
		if best == nil || len(v.by) > len(best.by) || (len(v.by) == len(best.by) && v.by[0] < best.by[0]) {
			best = v
		}
	}
	if best == nil {
		return nil, nil
	}
	return best.pe, best.by
}

func ranksNoun(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	return "ranks " + words.Ints(rs)
}

// lineWriter writes whole lines to dst, each with prefix, under a lock
// shared by every rank's streams so lines never interleave.
type lineWriter struct {
	mu     *sync.Mutex
	dst    io.Writer
	prefix string
	buf    []byte
	// said, shared by the ranks' stderr writers, holds the error lines
	// already printed: a refusal every rank reaches alike (a size that does
	// not fit, a bad flag) is printed once, not once per rank.
	said map[string]bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.mu.Lock()
		line := string(w.buf[:i])
		if w.said == nil || !strings.HasPrefix(line, "collbench: ") || !w.said[line] {
			if w.said != nil && strings.HasPrefix(line, "collbench: ") {
				w.said[line] = true
			}
			fmt.Fprintf(w.dst, "%s%s\n", w.prefix, line)
		}
		w.mu.Unlock()
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 16<<20 { // a line without end: pass it on
		w.flush()
	}
	return len(p), nil
}

// flush writes a last line that had no newline.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.mu.Lock()
		fmt.Fprintf(w.dst, "%s%s\n", w.prefix, w.buf)
		w.mu.Unlock()
		w.buf = nil
	}
}

// Plan is what launch gives each process it starts.
type Plan struct {
	procs    int // processes on this host
	nodes    int // simulated nodes on this host (--nodes)
	nnodes   int // hosts in the world (--nnodes)
	nodeRank int
	rootAddr string
	token    string
	host     string
	reports  string
}

func (o *Config) getenv(k string) string {
	if o.Getenv != nil {
		return o.Getenv(k)
	}
	return os.Getenv(k)
}

// envInt reads the first of the variables that holds a non-negative integer.
func (o *Config) envInt(names ...string) (int, string, bool) {
	for _, n := range names {
		if v := o.getenv(n); v != "" {
			if x, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && x >= 0 {
				return x, n, true
			}
		}
	}
	return 0, "", false
}

// plan checks the flags and resolves the multi-node settings from the
// flags or the cluster's variables.
func (o *Config) plan() (Plan, error) {
	p := Plan{procs: o.Procs, nodes: o.Nodes, nnodes: o.NNodes, nodeRank: o.NodeRank, rootAddr: o.RootAddr}
	if p.nnodes == 0 {
		p.nnodes = 1
		if v, _, ok := o.envInt("COLLBENCH_NNODES", "SLURM_NNODES"); ok {
			p.nnodes = v
		}
	}
	if p.nodeRank < 0 && p.nnodes > 1 {
		if v, _, ok := o.envInt("COLLBENCH_NODE_RANK"); ok {
			p.nodeRank = v
		} else if v, ok := bootstrap.PodIndex(o.getenv); ok {
			p.nodeRank = v
		} else if v, _, ok := o.envInt("SLURM_NODEID"); ok {
			p.nodeRank = v
		}
	}
	if p.rootAddr == "" && p.nnodes > 1 {
		p.rootAddr = o.getenv(bootstrap.EnvRootAddr)
	}
	switch {
	case p.procs < 1:
		return p, planErrorf("invalid -n %d: must be at least 1", p.procs)
	case p.nodes < 1 || p.procs%p.nodes != 0:
		return p, planErrorf("invalid --nodes %d: must divide the %d processes evenly", p.nodes, p.procs)
	case o.Port < 0 || o.Port > 65535:
		return p, planErrorf("invalid --port %d: must be between 1 and 65535, or 0 for a free port", o.Port)
	case len(o.Args) == 0:
		return p, planErrorf("launch needs a collbench command to run, e.g. collbench launch -n 4 -- allreduce")
	case o.Args[0] == "launch":
		return p, planErrorf("launch cannot start launch")
	case o.CheckArgs != nil && o.CheckArgs(o.Args) != nil:
		return p, &PlanError{o.CheckArgs(o.Args)}
	case p.nnodes < 1:
		return p, planErrorf("invalid --nnodes %d: must be at least 1", p.nnodes)
	case p.nnodes > 1 && p.nodes > 1:
		return p, planErrorf("--nodes simulates hosts on one host; with --nnodes %d the hosts are real (leave --nodes out)", p.nnodes)
	case p.nnodes > 1 && (p.nodeRank < 0 || p.nodeRank >= p.nnodes):
		return p, planErrorf("--nnodes %d needs this host's --node-rank between 0 and %d (or $COLLBENCH_NODE_RANK, a Kubernetes pod index, $SLURM_NODEID)", p.nnodes, p.nnodes-1)
	case p.nnodes > 1 && p.rootAddr == "":
		return p, planErrorf("--nnodes %d needs --root-addr host:port (node 0's address), or $%s", p.nnodes, bootstrap.EnvRootAddr)
	}
	if p.nnodes == 1 {
		p.nodeRank = 0
		if o.Port > 0 {
			p.rootAddr = "127.0.0.1:" + strconv.Itoa(o.Port)
		}
	}
	return p, nil
}

// Env is the environment launch adds for its process r (0-based on this host).
func (p Plan) Env(r int) []string {
	perNode := p.procs / p.nodes
	world := p.procs * p.nnodes
	env := []string{
		bootstrap.EnvRank + "=" + strconv.Itoa(p.nodeRank*p.procs+r),
		bootstrap.EnvSize + "=" + strconv.Itoa(world),
		bootstrap.EnvLocalRank + "=" + strconv.Itoa(r%perNode),
		bootstrap.EnvLocalSize + "=" + strconv.Itoa(perNode),
		bootstrap.EnvRootAddr + "=" + p.rootAddr,
		bootstrap.EnvDevice + "=" + strconv.Itoa(r),
	}
	if p.token != "" {
		env = append(env, secret.EnvToken+"="+p.token)
	}
	if p.reports != "" {
		env = append(env, bootstrap.EnvReports+"="+p.reports)
	}
	if p.nodes > 1 {
		env = append(env, fmt.Sprintf("NCCL_HOSTID=%s-node%d", p.host, r/perNode))
	}
	return env
}

// child is one rank started by launch and how it ended.
type child struct {
	rank           int
	cmd            *exec.Cmd
	done           chan struct{}
	at             time.Duration
	code           int
	signal         syscall.Signal
	killedByLaunch bool
}

func (c *child) failed() bool { return c.code != 0 || c.signal != 0 }

// exitCode is what the launcher exits with when c is the cause: its code,
// or 128 + the signal that killed it, as shells report it.
func (c *child) exitCode() int {
	if c.signal != 0 {
		return 128 + int(c.signal)
	}
	return c.code
}

func (c *child) how() string {
	switch {
	case c.signal != 0 && c.killedByLaunch:
		return fmt.Sprintf("was stopped by launch (signal %s)", signalName(c.signal))
	case c.signal != 0:
		return fmt.Sprintf("was killed by signal %s", signalName(c.signal))
	case c.code == 0:
		return "exited normally"
	}
	return fmt.Sprintf("exited with code %d", c.code)
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "KILL", syscall.SIGTERM: "TERM", syscall.SIGINT: "INT",
		syscall.SIGSEGV: "SEGV", syscall.SIGABRT: "ABRT", syscall.SIGBUS: "BUS", syscall.SIGHUP: "HUP"}
	if n, ok := names[s]; ok {
		return n
	}
	return strconv.Itoa(int(s))
}

// reportEnds says how every rank ended, the first failure first, as the cause.
func reportEnds(w io.Writer, children []*child, first *child) {
	fmt.Fprintf(w, "collbench launch: rank %d (pid %d) %s after %.1f s\n",
		first.rank, first.cmd.Process.Pid, first.how(), first.at.Seconds())
	groups := map[string][]int{}
	var order []string
	for _, c := range children {
		if c == first {
			continue
		}
		h := c.how()
		if _, ok := groups[h]; !ok {
			order = append(order, h)
		}
		groups[h] = append(groups[h], c.rank)
	}
	for _, h := range order {
		rs := groups[h]
		noun := "rank"
		if len(rs) > 1 {
			noun = "ranks"
		}
		fmt.Fprintf(w, "collbench launch: %s %s then %s\n", noun, words.Ints(rs), h)
	}
}

// allStoppedOrDone reports whether every rank has ended or is stopped by a
// signal (state T in /proc).
func allStoppedOrDone(children []*child) bool {
	for _, c := range children {
		select {
		case <-c.done:
			continue
		default:
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
		if err != nil {
			continue
		}
		// The state follows the command name in parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}
