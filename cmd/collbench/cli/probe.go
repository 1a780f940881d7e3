package cli

import (
	"bytes"
	"collbench/bootstrap"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"collbench/internal/faults"
	"collbench/nccl"
	"collbench/results"
	"collbench/suites"
	"collbench/watchdog"
)

// The algorithm probe records which algorithm, protocol and channels NCCL
// picks for every row. NCCL writes its choices to its log only when
// NCCL_DEBUG=INFO, and then for every call, which would slow the timed
// loops; it reads that setting once per process. So before the sweep, a
// child process (one per rank process under a launcher) opens the same
// communicators with the log sent to a file in a private directory, issues
// every row once, and matches the log's lines to the rows. Nothing of it
// reaches the user's terminal, and a probe that fails or takes too long
// only costs the rows their algorithm.
//
// Parent and child talk over two pipes (the child's fds 3 and 4) in
// frames: a type byte, a 4-byte length, the payload. Under a launcher the
// child's control messages (the NCCL id, group ids, results) go through
// its parent, which relays them over the world's control connection; every
// relayed round carries a status byte, so when one rank's probe ends, every
// parent learns it in the same round and all leave the relay together.

// EnvProbe, set to "always", runs the probe on the cpu backend too (which
// knows its algorithms without one): a check of the probe itself. "off"
// skips it on NCCL.
const EnvProbe = "COLLBENCH_ALGORITHM_PROBE"

// Frame types.
const (
	frameSpec     = 'S' // parent -> child: the probeSpec
	frameData     = 'D' // parent -> child: a relayed round's result
	frameError    = 'E' // parent -> child: the relay failed
	frameGather   = 'A' // child -> parent: an all-gather (or a gather)
	frameGather0  = 'G' // child -> parent: a gather to rank 0
	frameAbort    = 'X' // child -> parent: the child failed
	frameClose    = 'C' // child -> parent: done
	frameResult   = 'R' // child -> parent: the probeResult
	frameProgress = 'P' // child -> parent: how far it got (a stage, 4 bytes)
	maxFrameBytes = 64 << 20
)

// probeSpec is what the probe child runs.
type probeSpec struct {
	Backend string        `json:"backend"`
	Lib     string        `json:"lib,omitempty"`
	Ranks   int           `json:"ranks"` // ranks this child opens (single process)
	Multi   bool          `json:"multi,omitempty"`
	Rank    int           `json:"rank"`
	Size    int           `json:"size"`
	Hosts   []string      `json:"hosts,omitempty"`
	LocalIP string        `json:"local_ip,omitempty"`
	Device  int           `json:"device"`
	Plan    suites.Plan   `json:"plan"`
	Cases   []suites.Case `json:"cases"`
	Groups  [][]int       `json:"groups"`
	LogFile string        `json:"log_file"`
}

// probeChoice is one group's algorithm for one row.
type probeChoice struct {
	Row    int                 `json:"row"`
	Group  int                 `json:"group"`
	Choice *results.AlgoChoice `json:"choice"`
}

// probeResult is what the probe found.
type probeResult struct {
	Choices []probeChoice `json:"choices"`
	// Note says why some rows have no choice, "" when all do.
	Note string `json:"note,omitempty"`
}

// byRow indexes the choices: row -> group -> choice.
func (r *probeResult) byRow() map[int]map[int]*results.AlgoChoice {
	out := map[int]map[int]*results.AlgoChoice{}
	if r == nil {
		return out
	}
	for _, c := range r.Choices {
		if out[c.Row] == nil {
			out[c.Row] = map[int]*results.AlgoChoice{}
		}
		out[c.Row][c.Group] = c.Choice
	}
	return out
}

// encodeParts packs a round's parts; nil parts stay nil.
func encodeParts(parts [][]byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, uint32(len(parts)))
	for _, p := range parts {
		n := uint32(len(p))
		if p == nil {
			n = ^uint32(0)
		}
		_ = binary.Write(&b, binary.BigEndian, n)
		b.Write(p)
	}
	return b.Bytes()
}

func decodeParts(b []byte) ([][]byte, error) {
	r := bytes.NewReader(b)
	var k uint32
	if err := binary.Read(r, binary.BigEndian, &k); err != nil || int(k) > len(b) {
		return nil, fmt.Errorf("malformed relay reply")
	}
	out := make([][]byte, k)
	for i := range out {
		var n uint32
		if err := binary.Read(r, binary.BigEndian, &n); err != nil {
			return nil, fmt.Errorf("malformed relay reply")
		}
		if n == ^uint32(0) {
			continue
		}
		if int(n) > r.Len() {
			return nil, fmt.Errorf("malformed relay reply")
		}
		out[i] = make([]byte, n)
		_, _ = io.ReadFull(r, out[i])
	}
	return out, nil
}

// ---- parent side ----

// probeTimeout bounds the whole probe: opening the communicators and one
// operation per row.
// COLLBENCH_PROBE_TIMEOUT replaces it (tests plant hung probes).
func (o *BenchOptions) probeTimeout() time.Duration {
	if d, err := time.ParseDuration(o.Factory.getenv(EnvProbeTimeout)); err == nil && d > 0 {
		return d
	}
	return o.BootstrapTimeout + time.Minute
}

// EnvProbeTimeout bounds the algorithm probe instead of the default.
const EnvProbeTimeout = "COLLBENCH_PROBE_TIMEOUT"

// probeAlgorithms runs the probe when the backend is NCCL (or when
// COLLBENCH_ALGORITHM_PROBE=always). It returns nil and a note when there is
// nothing to probe or the probe failed; only a cancelled run is an error.
func (o *BenchOptions) probeAlgorithms(ctx context.Context, ss *session, plan suites.Plan, cases []suites.Case, layout suites.Layout) (*probeResult, string, error) {
	f := o.Factory
	b := ss.choice.Backend
	mode := strings.ToLower(f.getenv(EnvProbe))
	want := (b.Name() == "nccl" && mode != "off") || mode == "always"
	note := ""
	if want && b.Name() == "nccl" {
		if ok, why := nccl.TuningLogUsable(b.Info().VersionCode); !ok {
			want, note = false, "no algorithm per row: "+why
		}
	}
	if ss.pw.multi() {
		// Every process probes, or none: a host with another NCCL may say no.
		flag := []byte{0}
		if want {
			flag[0] = 1
		}
		all, err := ss.pw.ctl.AllGather(flag)
		if err != nil {
			return nil, "", &RunError{err}
		}
		for r, v := range all {
			if len(v) != 1 || v[0] != 1 {
				if want {
					note = fmt.Sprintf("no algorithm per row: rank %d cannot probe (another NCCL version, or %s=off there)", r, EnvProbe)
				}
				want = false
				break
			}
		}
	}
	if !want {
		return nil, note, nil
	}
	dir, release, err := tempDir("collbench-probe-")
	if err != nil {
		return nil, "no algorithm per row: " + err.Error(), nil
	}
	defer release()
	spec := probeSpec{Backend: b.Name(), Ranks: ss.n, Plan: plan, Cases: cases, Groups: layout.Groups,
		LogFile: filepath.Join(dir, "nccl-tuning.log"), Size: ss.n}
	if b.Name() == "nccl" {
		spec.Lib = b.Info().Library
	}
	// The probe's only job is the choices: one operation per row.
	spec.Plan.Iters, spec.Plan.Warmup, spec.Plan.Check, spec.Plan.Cycles, spec.Plan.Agg = 1, 0, 0, 1, 1
	spec.Plan.IterStats, spec.Plan.GraphReplays = false, 0
	if ss.pw.multi() {
		spec.Multi, spec.Rank, spec.Size, spec.Hosts = true, ss.pw.ctl.Rank(), ss.pw.ctl.Size(), ss.pw.ctl.Hosts()
		spec.Device = f.localDevice(ss.pw, o.Device)
		if t, ok := ss.pw.ctlTCP(); ok {
			spec.LocalIP = t.LocalIP()
		}
	}
	res, err := runProbe(ctx, f, ss.pw, spec, o.probeTimeout())
	if ctx.Err() != nil {
		return nil, "", ctx.Err()
	}
	if err != nil {
		return nil, "no algorithm per row: the algorithm probe failed: " + err.Error(), nil
	}
	if res == nil { // a rank other than 0
		return nil, "", nil
	}
	return res, res.Note, nil
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 8<<10 {
		t.buf = t.buf[len(t.buf)-8<<10:]
	}
	return len(p), nil
}

// lastLine is the last non-empty line written.
func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "collbench: ")
}

// runProbe starts the child, relays its control messages under a launcher,
// and returns rank 0's result (nil on other ranks). The child is killed if
// it outlives timeout or ctx.
func runProbe(ctx context.Context, f *Factory, pw *processWorld, spec probeSpec, timeout time.Duration) (*probeResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	toChild, childIn, err := os.Pipe() // child reads toChild (fd 3)
	if err != nil {
		return nil, err
	}
	fromChild, childOut, err := os.Pipe() // child writes childOut (fd 4)
	if err != nil {
		toChild.Close()
		childIn.Close()
		return nil, err
	}
	defer childIn.Close()
	defer fromChild.Close()
	var tail tailBuffer
	cmd := exec.Command(exe, "algorithm-probe")
	cmd.Env = f.Environ()
	cmd.Stdout, cmd.Stderr = &tail, &tail
	cmd.ExtraFiles = []*os.File{toChild, childOut}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		toChild.Close()
		childOut.Close()
		return nil, fmt.Errorf("starting it: %v", err)
	}
	toChild.Close()
	childOut.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
		}
	}
	// Whatever happens, the child does not outlive the probe.
	defer func() {
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			kill()
			<-exited
		}
	}()
	deadline := time.Now().Add(timeout)
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	timer := time.AfterFunc(timeout, kill)
	defer timer.Stop()

	raw, _ := json.Marshal(spec)
	if err := bootstrap.WriteFrame(childIn, frameSpec, raw); err != nil {
		return nil, fmt.Errorf("sending it its work: %v", err)
	}
	childFailed := func(err error) error {
		werr := <-exited
		exited <- werr
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("it took longer than %s and was stopped", timeout.Round(time.Second))
		case tail.lastLine() != "":
			return errors.New(tail.lastLine())
		case werr != nil:
			return fmt.Errorf("it ended early (%v)", werr)
		}
		return err
	}
	var result *probeResult
	stage := stageStarting
	for {
		typ, p, err := bootstrap.ReadFrame(fromChild, maxFrameBytes)
		if err != nil {
			// The child ended or was killed.
			cause := childFailed(fmt.Errorf("it ended without a result"))
			if pw.multi() {
				why, rerr := relayEnd(pw, stage, fmt.Sprintf("rank %d: %v (%s)", pw.ctl.Rank(), cause, describeStage(stage, spec)))
				if rerr != nil {
					return nil, rerr
				}
				if why != "" {
					return nil, fmt.Errorf("the probe ended on %s", why)
				}
			}
			return nil, cause
		}
		switch typ {
		case frameProgress:
			if len(p) == 4 {
				stage = int(int32(binary.BigEndian.Uint32(p)))
			}
		case frameResult:
			result = &probeResult{}
			if err := json.Unmarshal(p, result); err != nil {
				return nil, fmt.Errorf("unreadable result: %v", err)
			}
			if !pw.multi() {
				return result, nil
			}
		case frameGather, frameGather0, frameAbort, frameClose:
			if !pw.multi() {
				if typ == frameAbort {
					return nil, errors.New(string(p))
				}
				continue
			}
			if typ == frameAbort || typ == frameClose {
				why := "done"
				if typ == frameAbort {
					why = fmt.Sprintf("rank %d: %s", pw.ctl.Rank(), p)
				}
				cause, err := relayEnd(pw, stage, why)
				if err != nil {
					return nil, err
				}
				if cause != "" {
					return nil, fmt.Errorf("the probe ended on %s", cause)
				}
				if pw.ctl.Rank() == 0 {
					if result == nil {
						return nil, fmt.Errorf("it ended without a result")
					}
					return result, nil
				}
				return nil, nil
			}
			parts, ended, err := relayRound(pw, p)
			if err != nil {
				return nil, err
			}
			if ended != "" {
				_ = bootstrap.WriteFrame(childIn, frameError, []byte("the probe ended on "+ended))
				if ended == "done" {
					ended = "another rank finished first"
				}
				return nil, fmt.Errorf("the probe ended on %s", ended)
			}
			if typ == frameGather0 && pw.ctl.Rank() != 0 {
				parts = nil
			}
			if err := bootstrap.WriteFrame(childIn, frameData, encodeParts(parts)); err != nil {
				return nil, childFailed(fmt.Errorf("it stopped reading"))
			}
		default:
			return nil, fmt.Errorf("unknown message %q from it", typ)
		}
	}
}

// relayRound relays one control round for the child: every parent
// contributes a status byte and its child's data. It returns the children's
// data, or why the probe ended somewhere ("done" when a child finished).
func relayRound(pw *processWorld, data []byte) ([][]byte, string, error) {
	all, err := pw.ctl.AllGather(append([]byte{0}, data...))
	if err != nil {
		return nil, "", &RunError{err}
	}
	parts := make([][]byte, len(all))
	for r, a := range all {
		if len(a) == 0 || a[0] != 0 {
			why := "rank " + fmt.Sprint(r)
			if len(a) > 5 {
				why = string(a[5:])
			}
			return nil, why, nil
		}
		parts[r] = a[1:]
	}
	return parts, "", nil
}

// Probe stages: before the communicators are open, open but before the
// first row, then the row being issued (0, 1, ...).
const (
	stageStarting = -2
	stageOpen     = -1
)

func describeStage(stage int, spec probeSpec) string {
	switch {
	case stage == stageStarting:
		return "while opening its communicators"
	case stage == stageOpen:
		return "before its first operation"
	}
	total := len(spec.Cases) * len(spec.Plan.Sizes)
	if len(spec.Plan.Sizes) == 0 || stage >= total {
		return fmt.Sprintf("at row %d", stage+1)
	}
	c := spec.Cases[stage/len(spec.Plan.Sizes)]
	return fmt.Sprintf("at row %d of %d, %s %s", stage+1, total, c.Coll, suites.FormatBytes(spec.Plan.Sizes[stage%len(spec.Plan.Sizes)]))
}

// relayEnd is this parent's last round: its child ended at stage, for why.
// It returns the probe's cause across the world: the first rank whose child
// ended for a reason of its own; if every child was stopped for taking too
// long, the one that got least far (the others were waiting for it).
func relayEnd(pw *processWorld, stage int, why string) (string, error) {
	msg := make([]byte, 5, 5+len(why))
	msg[0] = 1
	binary.BigEndian.PutUint32(msg[1:], uint32(int32(stage)))
	all, err := pw.ctl.AllGather(append(msg, why...))
	if err != nil {
		return "", &RunError{err}
	}
	own, slowest, least := "", "", 0
	for _, a := range all {
		if len(a) < 5 || a[0] != 1 {
			continue
		}
		st, w := int(int32(binary.BigEndian.Uint32(a[1:5]))), string(a[5:])
		if w == "done" {
			continue
		}
		if !strings.Contains(w, "took longer") {
			if own == "" {
				own = w
			}
			continue
		}
		if slowest == "" || st < least {
			slowest, least = w, st
		}
	}
	if own != "" {
		return own, nil
	}
	return slowest, nil
}

// attachAlgorithms puts the probe's choices (group -> choice) on a row;
// they replace what the world said itself.
func attachAlgorithms(row *results.Row, choices map[int]*results.AlgoChoice) {
	if len(choices) == 0 {
		return
	}
	for gi := range row.Groups {
		if c := choices[gi]; c != nil {
			row.Groups[gi].Algorithm = c
		}
	}
	first := -1
	for gi := range choices {
		if choices[gi] != nil && (first < 0 || gi < first) {
			first = gi
		}
	}
	if first >= 0 {
		row.Algorithm = choices[first]
	}
}

// ---- child side ----

// NewCmdAlgorithmProbe builds the hidden command the probe runs as.
func NewCmdAlgorithmProbe(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:    "algorithm-probe",
		Short:  "Internal: the child process of the algorithm probe",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			in, out := os.NewFile(3, "probe-in"), os.NewFile(4, "probe-out")
			if in == nil || out == nil {
				return usageErrorf("algorithm-probe is started by collbench itself, with its pipes")
			}
			return probeChild(cmd.Context(), f, in, out)
		},
	}
}

// relayControl is the child's control connection: every round goes
// through the parent.
type relayControl struct {
	spec probeSpec
	in   io.Reader
	out  io.Writer
	mu   sync.Mutex
}

func (c *relayControl) Rank() int         { return c.spec.Rank }
func (c *relayControl) Size() int         { return c.spec.Size }
func (c *relayControl) Hosts() []string   { return c.spec.Hosts }
func (c *relayControl) LocalIP() string   { return c.spec.LocalIP }
func (c *relayControl) Abort(cause error) { c.send(frameAbort, []byte(cause.Error())) }
func (c *relayControl) Close() error      { return nil } // the child says it is done itself

func (c *relayControl) send(typ byte, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = bootstrap.WriteFrame(c.out, typ, p)
}

func (c *relayControl) round(typ byte, data []byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := bootstrap.WriteFrame(c.out, typ, data); err != nil {
		return nil, err
	}
	rt, p, err := bootstrap.ReadFrame(c.in, maxFrameBytes)
	if err != nil {
		return nil, fmt.Errorf("the parent process is gone: %v", err)
	}
	if rt == frameError {
		return nil, errors.New(string(p))
	}
	return decodeParts(p)
}

func (c *relayControl) AllGather(data []byte) ([][]byte, error) { return c.round(frameGather, data) }
func (c *relayControl) Gather(data []byte) ([][]byte, error)    { return c.round(frameGather0, data) }

// probeChild is the child: it opens the world the spec describes, issues
// every row once, and matches its log to the rows.
func probeChild(ctx context.Context, f *Factory, in io.Reader, out io.Writer) error {
	typ, raw, err := bootstrap.ReadFrame(in, maxFrameBytes)
	if err != nil || typ != frameSpec {
		return fmt.Errorf("no work from the parent: %v", err)
	}
	var spec probeSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("unreadable work: %v", err)
	}
	ctl := &relayControl{spec: spec, in: in, out: out}
	fail := func(err error) error {
		if spec.Multi {
			ctl.Abort(err)
		}
		return err
	}
	if spec.Backend == "nccl" {
		for k, v := range map[string]string{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_DEBUG_FILE": spec.LogFile} {
			_ = os.Setenv(k, v)
		}
	}
	choice, err := f.ChooseBackend(spec.Backend, spec.Lib)
	if err != nil {
		return fail(err)
	}
	b := choice.Backend
	var w suites.World
	if spec.Multi {
		db, ok := b.(suites.DistributedBackend)
		if !ok {
			return fail(fmt.Errorf("the %s backend cannot run across processes", b.Name()))
		}
		w, err = db.OpenDistributed(ctx, ctl, spec.Device)
	} else {
		w, err = b.Open(ctx, spec.Ranks)
	}
	if err != nil {
		return fail(fmt.Errorf("opening the probe's world: %w", err))
	}
	layout := suites.Layout{Groups: spec.Groups}
	progress := func(stage int) {
		var p [4]byte
		binary.BigEndian.PutUint32(p[:], uint32(int32(stage)))
		ctl.send(frameProgress, p[:])
	}
	progress(stageOpen)
	me := spec.Rank
	fs, _ := faults.Parse(f.getenv(faults.EnvFaults))
	switch fs.ProbeFault(me) {
	case "hang":
		<-ctx.Done() // until the parent kills it
		return ctx.Err()
	case "exit":
		os.Exit(3)
	}
	issued, runErr := suites.ProbeRows(ctx, w, spec.Plan, spec.Cases, layout, watchdog.NewBoard(), progress)
	var local []probeChoice
	note := ""
	if ex, ok := w.(suites.Explainer); ok && b.Name() != "nccl" {
		local = explainRows(ex, spec, issued)
	}
	closeErr := w.Close()
	if b.Name() == "nccl" {
		var why string
		local, why = matchLog(spec, issued, b.Info().VersionCode)
		if why != "" {
			note = "no algorithm per row: " + why
		}
	}
	if runErr != nil {
		note = fmt.Sprintf("the algorithm probe stopped after %d of %d rows: %v", issued, len(spec.Cases)*len(spec.Plan.Sizes), runErr)
	} else if closeErr != nil && note == "" && len(local) == 0 {
		note = "the algorithm probe could not close its communicators: " + closeErr.Error()
	}
	res := probeResult{Choices: local, Note: note}
	if spec.Multi {
		mine, _ := json.Marshal(res)
		all, err := ctl.Gather(mine)
		if err != nil {
			return fail(err)
		}
		if me == 0 {
			res = probeResult{}
			notes := map[string]bool{}
			for _, raw := range all {
				var r probeResult
				if json.Unmarshal(raw, &r) == nil {
					res.Choices = append(res.Choices, r.Choices...)
					if r.Note != "" && !notes[r.Note] {
						notes[r.Note] = true
						res.Note = strings.TrimPrefix(res.Note+"; "+r.Note, "; ")
					}
				}
			}
		}
	}
	raw, _ = json.Marshal(res)
	if err := bootstrap.WriteFrame(out, frameResult, raw); err != nil {
		return err
	}
	if spec.Multi {
		ctl.send(frameClose, nil)
	}
	return nil
}

// explainRows asks the world itself (the cpu backend) for every row's
// algorithm.
func explainRows(ex suites.Explainer, spec probeSpec, issued int) []probeChoice {
	var out []probeChoice
	for row := 0; row < issued; row++ {
		c := spec.Cases[row/len(spec.Plan.Sizes)]
		size := spec.Plan.Sizes[row%len(spec.Plan.Sizes)]
		for gi, g := range spec.Groups {
			if !groupLocal(spec, g) {
				continue
			}
			bytes := suites.GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0).Bytes
			if a := ex.Algorithm(c.Coll, bytes, len(g)); a != nil {
				a.Source += " (probe)"
				out = append(out, probeChoice{Row: row, Group: gi, Choice: a})
			}
		}
	}
	return out
}

// groupLocal reports whether this child drives the group's rank 0, whose
// log has the group's choices.
func groupLocal(spec probeSpec, g []int) bool {
	return !spec.Multi || g[0] == spec.Rank
}

// matchLog reads the child's NCCL log and matches each group's decisions
// to the rows it issued. It returns the choices and why rows have none.
func matchLog(spec probeSpec, issued int, version int) ([]probeChoice, string) {
	fh, err := os.Open(spec.LogFile)
	if err != nil {
		return nil, "NCCL wrote no log: " + err.Error()
	}
	defer fh.Close()
	lines, err := nccl.ParseTuningLog(fh)
	if err != nil {
		return nil, "reading NCCL's log: " + err.Error()
	}
	var out []probeChoice
	var whys []string
	for gi, g := range spec.Groups {
		if !groupLocal(spec, g) {
			continue
		}
		dev := g[0] // one process: rank r drives GPU r
		if spec.Multi {
			dev = spec.Device
		}
		var mine []nccl.TuningDecision
		for _, d := range lines {
			if d.Device == dev {
				mine = append(mine, d)
			}
		}
		var calls []nccl.ExpectedCall
		for row := 0; row < issued; row++ {
			c := spec.Cases[row/len(spec.Plan.Sizes)]
			size := spec.Plan.Sizes[row%len(spec.Plan.Sizes)]
			geo := suites.GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0)
			switch {
			case len(g) < 2 || geo.Count == 0:
				// NCCL copies locally or does nothing: no choice.
			case !nccl.LogsChoice(c.Coll):
				out = append(out, probeChoice{Row: row, Group: gi, Choice: &results.AlgoChoice{Algo: "P2P",
					Source: "NCCL runs it as sends and receives: no algorithm or protocol choice"}})
			default:
				calls = append(calls, nccl.ExpectedCall{Coll: c.Coll, Key: row})
			}
		}
		if len(calls) == 0 {
			continue
		}
		matched, err := nccl.MatchTuning(calls, mine)
		if err != nil {
			whys = append(whys, fmt.Sprintf("group %d: NCCL %s's log does not match the calls: %v", gi, nccl.FormatVersion(version), err))
			continue
		}
		for row, d := range matched {
			out = append(out, probeChoice{Row: row, Group: gi, Choice: d.Choice()})
		}
	}
	return out, strings.Join(whys, "; ")
}
