package probe

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"collbench/backend/nccl"
	"collbench/bootstrap"
	"collbench/internal/faults"
	"collbench/measure"
	"collbench/watchdog"
)

// relayControl is the child's control connection: every round goes
// through the parent.
type relayControl struct {
	spec Spec
	in   io.Reader
	out  io.Writer
	mu   sync.Mutex
	// drop (a planted fault): exit right after asking for a round, so the
	// parent's answer finds no reader.
	drop bool
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
	if c.drop {
		os.Exit(3)
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

// Opener opens a backend by name and library path, as the run chose it.
type Opener func(name, lib string) (measure.Backend, error)

// Child is the probe's child process: it reads its Spec from in, opens the
// world the spec describes (through the parent's relay when it spans
// processes), issues every row once, matches NCCL's log to the rows, and
// writes the Result to out. faultSpec is COLLBENCH_FAULTS, for the probe
// faults tests plant.
func Child(ctx context.Context, open Opener, faultSpec string, in io.Reader, out io.Writer) error {
	typ, raw, err := bootstrap.ReadFrame(in, maxFrameBytes)
	if err != nil || typ != frameSpec {
		return fmt.Errorf("no work from the parent: %v", err)
	}
	var spec Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("unreadable work: %v", err)
	}
	fs, _ := faults.Parse(faultSpec)
	ctl := &relayControl{spec: spec, in: in, out: out, drop: fs.ProbeFault(spec.Rank) == "drop"}
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
	b, err := open(spec.Backend, spec.Lib)
	if err != nil {
		return fail(err)
	}
	var w measure.World
	if spec.Multi {
		db, ok := b.(measure.DistributedBackend)
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
	layout := measure.Layout{Groups: spec.Groups}
	progress := func(stage int) {
		var p [4]byte
		binary.BigEndian.PutUint32(p[:], uint32(int32(stage))) //nolint:gosec // G115: stages are small numbers sent as two's complement; frame lengths are bounded by maxFrameBytes
		ctl.send(frameProgress, p[:])
	}
	progress(stageOpen)
	me := spec.Rank
	switch fs.ProbeFault(me) {
	case "hang":
		<-ctx.Done() // until the parent kills it
		return ctx.Err()
	case "exit":
		os.Exit(3)
	}
	issued, runErr := measure.ProbeRows(ctx, w, spec.Plan, spec.Cases, layout, watchdog.NewBoard(), progress)
	var local []Choice
	note := ""
	if ex, ok := w.(measure.Explainer); ok && b.Name() != "nccl" {
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
	res := Result{Choices: local, Note: note}
	if spec.Multi {
		mine, _ := json.Marshal(res)
		all, err := ctl.Gather(mine)
		if err != nil {
			return fail(err)
		}
		if me == 0 {
			res = Result{}
			notes := map[string]bool{}
			for _, raw := range all {
				var r Result
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
func explainRows(ex measure.Explainer, spec Spec, issued int) []Choice {
	var out []Choice
	for row := 0; row < issued; row++ {
		c := spec.Cases[row/len(spec.Plan.Sizes)]
		size := spec.Plan.Sizes[row%len(spec.Plan.Sizes)]
		for gi, g := range spec.Groups {
			if !groupLocal(spec, g) {
				continue
			}
			bytes := measure.GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0).Bytes
			if a := ex.Algorithm(c.Coll, bytes, len(g)); a != nil {
				a.Source += " (probe)"
				out = append(out, Choice{Row: row, Group: gi, Choice: a})
			}
		}
	}
	return out
}

// groupLocal reports whether this child drives the group's rank 0, whose
// log has the group's choices.
func groupLocal(spec Spec, g []int) bool {
	return !spec.Multi || g[0] == spec.Rank
}

// matchLog reads the child's NCCL log and matches each group's decisions
// to the rows it issued. It returns the choices and why rows have none.
func matchLog(spec Spec, issued int, version int) ([]Choice, string) {
	fh, err := os.Open(spec.LogFile)
	if err != nil {
		return nil, "NCCL wrote no log: " + err.Error()
	}
	defer fh.Close()
	lines, err := nccl.ParseTuningLog(fh)
	if err != nil {
		return nil, "reading NCCL's log: " + err.Error()
	}
	var out []Choice
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
			geo := measure.GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0)
			switch {
			case len(g) < 2 || geo.Count == 0:
				// NCCL copies locally or does nothing: no choice.
			case !nccl.LogsChoice(c.Coll):
				out = append(out, Choice{Row: row, Group: gi, Choice: nccl.P2PChoice()})
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
			out = append(out, Choice{Row: row, Group: gi, Choice: d.Choice()})
		}
	}
	return out, strings.Join(whys, "; ")
}
