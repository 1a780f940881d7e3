package cli

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

	"github.com/spf13/cobra"

	"collbench/bootstrap"
	"collbench/internal/secret"
)

// LaunchOptions are the flags of `collbench launch`.
type LaunchOptions struct {
	IO     *IOStreams
	Ctx    context.Context
	Procs  int
	Nodes  int
	Port   int
	Args   []string
	Binary string // the collbench to start; this executable by default
	// NNodes, NodeRank and RootAddr join this host's processes to those
	// that launch starts on other hosts: node r's process i is world rank
	// r*Procs+i, and rank 0 serves the rendezvous at RootAddr.
	NNodes   int
	NodeRank int
	RootAddr string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
}

// NewCmdLaunch builds `collbench launch`.
func NewCmdLaunch(f *Factory, runF func(*LaunchOptions) error) *cobra.Command {
	o := &LaunchOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "launch -n N [--nodes K] -- COMMAND [FLAGS]",
		Short: "Start N collbench processes on this host, one GPU each, as one world",
		Long: `launch starts N processes of collbench on this host, one per GPU, wires their
environment (rank, world size, local rank, rendezvous address) and streams their
output: rank 0's unchanged, the others' prefixed with their rank. It exits with
the worst exit code of its processes; Ctrl-C stops them all.

--nodes K splits the processes into K simulated nodes (different NCCL_HOSTID), so
NCCL treats them as separate hosts and uses its network transport between them.`,
		Example: "  collbench launch -n 4 -- allreduce --sizes 8:1G\n  collbench launch -n 4 --nodes 2 -- sweep --collectives all\n  collbench launch -n 4 -- world",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("launch needs a collbench command to run, e.g. collbench launch -n 4 -- allreduce")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			o.Args = args
			if runF != nil {
				return runF(o)
			}
			return launchRun(o)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().IntVarP(&o.Procs, "procs", "n", 0, "number of processes (default: one per visible GPU, or 4 without GPUs)")
	cmd.Flags().IntVar(&o.Nodes, "nodes", 1, "simulated nodes the processes are split into (different NCCL_HOSTID)")
	cmd.Flags().IntVar(&o.Port, "port", 0, "rendezvous port on 127.0.0.1 (default: a free port)")
	cmd.Flags().IntVar(&o.NNodes, "nnodes", 0, "hosts that each run launch for one world (default: $COLLBENCH_NNODES, $SLURM_NNODES, or 1)")
	cmd.Flags().IntVar(&o.NodeRank, "node-rank", -1, "this host's index among --nnodes (default: $COLLBENCH_NODE_RANK, the pod's index in a Kubernetes Indexed Job or JobSet, or $SLURM_NODEID)")
	cmd.Flags().StringVar(&o.RootAddr, "root-addr", "", "with --nnodes: host:port where node 0 serves the rendezvous (default: $COLLBENCH_ROOT_ADDR)")
	atLeast(cmd.Flags(), "1", "procs", "nodes", "nnodes")
	atLeast(cmd.Flags(), "0", "port", "node-rank")
	return cmd
}

func launchRun(o *LaunchOptions) error {
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Procs == 0 {
		o.Procs = visibleGPUs()
	}
	plan, err := o.plan()
	if err != nil {
		return err
	}
	bin := o.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return &RunError{fmt.Errorf("finding collbench's own executable: %w", err)}
		}
		bin = exe
	}
	if plan.rootAddr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return &RunError{fmt.Errorf("finding a free port: %w", err)}
		}
		plan.rootAddr = ln.Addr().String()
		ln.Close()
	}
	// Only this job's ranks can join: they share a secret made here (or
	// the one the environment already gives; across hosts it must).
	plan.token = o.getenv(secret.EnvToken)
	if plan.token == "" && plan.nnodes == 1 {
		if plan.token, err = secret.New(); err != nil {
			return &RunError{err}
		}
	}
	// The children are started from this locked thread and get SIGKILL
	// when it goes away, so they never outlive the launcher.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Ranks that stop on a fault leave their verdict here, so the launcher
	// can name the cause they agree on rather than the first echo of it.
	reports, release, err := tempDir("collbench-launch-")
	if err != nil {
		return &RunError{fmt.Errorf("making the launch report directory: %w", err)}
	}
	defer release()
	plan.host, _ = os.Hostname()
	plan.reports = reports
	start := time.Now()
	var children []*child
	var outMu sync.Mutex
	said := map[string]bool{}
	for r := 0; r < plan.procs; r++ {
		cmd := exec.Command(bin, o.Args...)
		cmd.Env = append(os.Environ(), plan.env(r)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		ch := &child{rank: r, cmd: cmd, done: make(chan struct{})}
		// exec copies the streams itself and Wait returns only once they
		// are drained, so no line of a rank that ended is lost.
		if r == 0 {
			cmd.Stdout = &lineWriter{mu: &outMu, dst: o.IO.Out}
			cmd.Stderr = &lineWriter{mu: &outMu, dst: o.IO.ErrOut, said: said}
		} else {
			prefix := fmt.Sprintf("[rank %d] ", r)
			cmd.Stdout = &lineWriter{mu: &outMu, dst: o.IO.ErrOut, prefix: prefix}
			cmd.Stderr = &lineWriter{mu: &outMu, dst: o.IO.ErrOut, prefix: prefix, said: said}
		}
		if err := cmd.Start(); err != nil {
			for _, c := range children {
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
			return &RunError{fmt.Errorf("starting rank %d: %w", r, err)}
		}
		children = append(children, ch)
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
				ch.code = ExitRunFailed
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
			var sc *signalCause
			if errors.As(context.Cause(ctx), &sc) {
				stopSig = sc.sig
			}
			signalAll(stopSig.(syscall.Signal), false)
			grace = time.After(10 * time.Second)
			ctx = context.Background()
			if sc != nil {
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
		return &signalError{sig: stopSig, rows: -1}
	}
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
		fmt.Fprintf(o.IO.ErrOut, "collbench launch: the cause: %s (named by %s)\n", cause.Msg, ranksNoun(namedBy))
	}
	reportEnds(o.IO.ErrOut, children, first)
	return &exitCodeError{code: code}
}

// envLaunchReports names the directory where ranks started by launch leave
// the fault that stopped them.
const envLaunchReports = "COLLBENCH_LAUNCH_REPORTS"

// writeLaunchReport leaves this rank's fault for the launcher, if it
// started this process.
func (f *Factory) writeLaunchReport(err error) {
	dir := f.getenv(envLaunchReports)
	var pe *bootstrap.PeerError
	if dir == "" || !errors.As(err, &pe) {
		return
	}
	b, _ := json.Marshal(pe)
	_ = os.WriteFile(filepath.Join(dir, "rank-"+f.getenv(bootstrap.EnvRank)+".json"), b, 0o644)
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
	return "ranks " + joinRanks(rs)
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

// launchPlan is what launch gives each process it starts.
type launchPlan struct {
	procs    int // processes on this host
	nodes    int // simulated nodes on this host (--nodes)
	nnodes   int // hosts in the world (--nnodes)
	nodeRank int
	rootAddr string
	token    string
	host     string
	reports  string
}

func (o *LaunchOptions) getenv(k string) string {
	if o.Getenv != nil {
		return o.Getenv(k)
	}
	return os.Getenv(k)
}

// envInt reads the first of the variables that holds a non-negative integer.
func (o *LaunchOptions) envInt(names ...string) (int, string, bool) {
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
func (o *LaunchOptions) plan() (launchPlan, error) {
	p := launchPlan{procs: o.Procs, nodes: o.Nodes, nnodes: o.NNodes, nodeRank: o.NodeRank, rootAddr: o.RootAddr}
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
		return p, usageErrorf("invalid -n %d: must be at least 1", p.procs)
	case p.nodes < 1 || p.procs%p.nodes != 0:
		return p, usageErrorf("invalid --nodes %d: must divide the %d processes evenly", p.nodes, p.procs)
	case o.Port < 0 || o.Port > 65535:
		return p, usageErrorf("invalid --port %d: must be between 1 and 65535, or 0 for a free port", o.Port)
	case len(o.Args) == 0:
		return p, usageErrorf("launch needs a collbench command to run, e.g. collbench launch -n 4 -- allreduce")
	case o.Args[0] == "launch":
		return p, usageErrorf("launch cannot start launch")
	case childArgsError(o.Args) != nil:
		return p, childArgsError(o.Args)
	case p.nnodes < 1:
		return p, usageErrorf("invalid --nnodes %d: must be at least 1", p.nnodes)
	case p.nnodes > 1 && p.nodes > 1:
		return p, usageErrorf("--nodes simulates hosts on one host; with --nnodes %d the hosts are real (leave --nodes out)", p.nnodes)
	case p.nnodes > 1 && (p.nodeRank < 0 || p.nodeRank >= p.nnodes):
		return p, usageErrorf("--nnodes %d needs this host's --node-rank between 0 and %d (or $COLLBENCH_NODE_RANK, a Kubernetes pod index, $SLURM_NODEID)", p.nnodes, p.nnodes-1)
	case p.nnodes > 1 && p.rootAddr == "":
		return p, usageErrorf("--nnodes %d needs --root-addr host:port (node 0's address), or $%s", p.nnodes, bootstrap.EnvRootAddr)
	}
	if p.nnodes == 1 {
		p.nodeRank = 0
		if o.Port > 0 {
			p.rootAddr = "127.0.0.1:" + strconv.Itoa(o.Port)
		}
	}
	return p, nil
}

// env is the environment launch adds for its process r (0-based on this host).
func (p launchPlan) env(r int) []string {
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
		env = append(env, envLaunchReports+"="+p.reports)
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
		fmt.Fprintf(w, "collbench launch: %s %s then %s\n", noun, joinRanks(rs), h)
	}
}

func joinRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
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

// exitCodeError passes a child's exit code through without a message (the
// child already printed one).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return "" }

// visibleGPUs counts GPUs through the NCCL backend, or returns 4 when there
// are none, as the CPU backend's default.
func visibleGPUs() int {
	if b, err := openNCCL(""); err == nil {
		return b.DefaultRanks()
	}
	return 4
}

// childArgsError checks the command launch is to start in every process
// against collbench's own command tree (the command exists, its flags
// parse), so a typo fails once, at once, rather than in N processes.
func childArgsError(args []string) error {
	streams := &IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
	root := NewCmdRoot(NewFactory(streams))
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		return usageErrorf("launch: %q is not a collbench command (see 'collbench --help')", args[0])
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return usageErrorf("launch: the command to start is not valid: %v (see '%s --help')", err, cmd.CommandPath())
	}
	return nil
}
