package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"collbench/bootstrap"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// Bench is one benchmark run: what to measure (a plan resolved from the
// user's words), where (backend, ranks, groups), and what to tell the
// caller while it runs.
type Bench struct {
	Plan measure.Plan
	// Backend ("auto", "cpu", "nccl") and NCCLLib choose the backend;
	// Ranks is the rank count in one process (0: the backend's default).
	Backend, NCCLLib string
	Ranks            int
	// RankList splits the ranks into groups (measure.ParseLayout's words).
	RankList string
	// AllCollectives says the collectives were asked for as "all": those
	// that cannot run in these groups are left out with a note, not refused.
	AllCollectives bool
	Explain        bool // recorded in the document
	Memory         bool // measure what the memory went to
	// MaxTime refuses a plan whose least possible time (measure.Plan.FloorTime)
	// is longer, before any rank is opened; 0 sets no limit.
	MaxTime time.Duration
	RunFlags
	// Notes go into the document (what the run does differently from what
	// was asked).
	Notes []string
	// Tool is the version recorded in the document.
	Tool string

	// OnReady, if set, runs once the world's shape is known and before any
	// rank is opened: rank0 says whether this process writes results. An
	// error stops the run (e.g. an output path that cannot be written).
	OnReady func(choice BackendChoice, rank0 bool) error
	// OnProgress receives the runner's progress (rank 0 only).
	OnProgress func(measure.Progress)
	// OnEstimate receives, before the first row (rank 0 only), the least
	// time the plan takes at the time one operation of the warm-up took.
	OnEstimate func(floor, perOp time.Duration)
	// OnDocument receives the document after every row (index i), so rows
	// reach disk as they are measured, and once more at the end (i < 0).
	OnDocument func(doc *results.Document, i int, row results.Row)
}

// RunBench runs b and returns its document, which holds every row measured
// even when the error is not nil: a *CheckFailedError for wrong elements,
// a fault of the world or a *SignalError with its exit code, a *RunError
// otherwise. The document is nil only for a run refused before it started
// (a *UsageError, or a world that could not be formed). Under a launcher
// every process returns it; OnReady says which process is rank 0, the one
// that prints and writes results.
func (f *System) RunBench(ctx context.Context, b Bench) (*results.Document, error) {
	doc, _, err := f.runBench(ctx, b)
	return doc, err
}

// runBench runs one benchmark: it starts the session, fits the plan to
// the world, probes the algorithms, opens the world under its guard and
// measures; it returns the document and whether this process is rank 0.
func (f *System) runBench(ctx context.Context, o Bench) (_ *results.Document, _ bool, err error) {
	plan := o.Plan
	gr, err := f.begin(ctx, o.Backend, o.NCCLLib, o.Ranks, o.RunFlags, func(n int) error {
		if err := plan.Validate(n); err != nil {
			return &UsageError{Err: err}
		}
		if err := plan.CheckLength(n, o.MaxTime); err != nil {
			return &UsageError{Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, true, err
	}
	defer func() { gr.end(err) }()
	ctx, ss, board := gr.Ctx, gr.SS, gr.Board
	choice, b, launch, n, pw, hosts := ss.Choice, ss.Choice.Backend, ss.Launch, ss.N, ss.PW, ss.Hosts
	layout, cases, notes, err := fitPlan(&o, &plan, b, n, hosts)
	if err != nil {
		return nil, pw.Rank0(), err
	}
	if o.OnReady != nil {
		if err := o.OnReady(choice, pw.Rank0()); err != nil {
			var ue *UsageError
			if errors.As(err, &ue) {
				ue.Own = true // rank 0's output, say: the others would go on
			}
			return nil, pw.Rank0(), err
		}
	}

	doc := f.newDocument(o, plan, n, choice)
	doc.Notes = notes
	if o.Explain && n == 1 {
		doc.Notes = append(doc.Notes, oneRankNote(b.Name()))
	}
	if len(layout.Groups) > 1 {
		doc.Config.RankList = o.RankList
		doc.Config.Groups = layout.Groups
	}
	for r := 0; r < n; r++ {
		doc.Communicators = append(doc.Communicators, layout.Info(r, hosts))
	}
	if pw.Multi() {
		doc.Config.Processes, doc.Config.Launcher = n, launch.Source
	}
	probe, probeNote, err := f.probeAlgorithms(ctx, ss, o.RunFlags, plan, cases, layout)
	if err != nil {
		return nil, pw.Rank0(), err
	}
	if probeNote != "" {
		doc.Notes = append(doc.Notes, probeNote)
	}
	choices := probe.ByRow()
	if err := f.open(gr, o.RunFlags); err != nil {
		return nil, pw.Rank0(), err
	}
	world := gr.World
	doc.Environment.Backend.Devices = gr.Devices
	switch {
	case b.Name() == "nccl" && pw.Rank0():
		doc.Topology = f.ResultTopology(hosts, doc.Environment.Backend.Version)
	case b.Name() == "cpu":
		doc.Topology = f.CPUTopology(ss)
	}
	rn := &measure.Runner{World: world, Plan: plan, Cases: cases, Layout: layout, Board: board, MaxTime: o.MaxTime}
	if rec, ok := world.(measure.Recorder); ok && probe == nil && b.Name() == "nccl" {
		if on, why := rec.Recording(); !on && why != "" && probeNote == "" {
			doc.Notes = append(doc.Notes, "no algorithm per row: "+why)
		}
	}
	rn.OnNote = func(s string) { doc.Notes = append(doc.Notes, s) }
	meter, metered := world.(measure.MemoryMeter)
	var used0, usedPeak int64 = -1, -1
	if o.Memory && metered {
		used0 = meter.UsedMemory()
	}
	if pw.Rank0() {
		rn.OnProgress, rn.OnEstimate = o.OnProgress, o.OnEstimate
	}
	// What others took of the host while the rows were measured, where
	// this process is the whole run (another process of the world would
	// count as an other).
	loadSince := results.StartHostLoad()
	hostLoad := func() {
		if l := loadSince(); l != nil && doc.Config.Processes <= 1 {
			doc.Environment.HostLoad = l
		}
	}
	rn.OnRow = func(i int, row results.Row) {
		hostLoad()
		if len(layout.Groups) > 1 {
			row.Layout = o.RankList
		}
		attachAlgorithms(&row, choices[i])
		if o.Memory && metered {
			usedPeak = max(usedPeak, meter.UsedMemory())
		}
		if i < len(doc.Results) {
			doc.Results[i] = row
		} else {
			doc.Results = append(doc.Results, row)
		}
		doc.Summary = results.Summarize(doc.Results, false)
		if o.OnDocument != nil {
			o.OnDocument(doc, i, row)
		}
	}
	rows, runErr := rn.Run(ctx)
	if plan.Stable && rn.CyclesRun > 0 {
		doc.Config.Cycles = rn.CyclesRun // the bound stood there while running
		if rn.StableNote != "" {
			doc.Notes = append(doc.Notes, rn.StableNote)
		}
	}
	var tooLarge *measure.SizesTooLargeError
	var tooLong *measure.PlanTooLongError
	if errors.As(runErr, &tooLarge) || errors.As(runErr, &tooLong) {
		return nil, pw.Rank0(), &UsageError{Err: runErr} // refused before anything ran
	}
	runErr = gr.settle(runErr, len(rows))
	hostLoad()
	doc.Finished = f.Now()
	if runErr != nil {
		doc.Error = runErr.Error()
	}
	if o.Memory {
		doc.Memory = memoryReport(world, metered, meter, used0, usedPeak, rn.BufferBytes())
	}
	doc.Summary = results.Summarize(doc.Results, runErr != nil)
	rank0 := pw.Rank0()
	switch {
	case runErr != nil:
		return doc, rank0, classify(runErr)
	case doc.Summary.WrongTotal > 0:
		return doc, rank0, &CheckFailedError{Msg: fmt.Sprintf("verification failed: %d wrong elements", doc.Summary.WrongTotal)}
	case doc.Summary.BitsDiffer > 0:
		return doc, rank0, &CheckFailedError{Msg: fmt.Sprintf("bitwise: %d of the rows' halves gave other bits in another run or on another rank (see the bitwise lines)", doc.Summary.BitsDiffer)}
	}
	return doc, rank0, nil
}

// fitPlan fits the plan to the world: the rank list's layout, the cases
// the backend and the smallest group can run (hypercube left out of
// "all" where it cannot), and the notes on what was measured differently
// from what was asked. Every error is a usage error.
func fitPlan(o *Bench, plan *measure.Plan, b measure.Backend, n int, hosts []string) (measure.Layout, []measure.Case, []string, error) {
	layout, err := measure.ParseLayout(o.RankList, n, hosts)
	if err != nil {
		return measure.Layout{}, nil, nil, &UsageError{Err: err}
	}
	if err := measure.CheckGroups(plan.Collectives, layout.Groups); err != nil {
		if !o.AllCollectives {
			return measure.Layout{}, nil, nil, &UsageError{Err: err}
		}
		// "all" means all that can run here.
		plan.Collectives = slices.DeleteFunc(plan.Collectives, measure.Collective.PowerOfTwo)
		o.Notes = append(o.Notes, "hypercube is left out of all: it needs groups whose sizes are powers of two")
	}
	minGroup := n
	for _, g := range layout.Groups {
		minGroup = min(minGroup, len(g))
	}
	for _, r := range plan.Roots {
		if r >= minGroup && hasRooted(plan.Collectives) {
			return measure.Layout{}, nil, nil, UsageErrorf("invalid --root %d: the smallest group of --rank-list %s has %d ranks (roots are group ranks)", r, o.RankList, minGroup)
		}
	}
	cases, err := plan.Cases(b, minGroup)
	if err != nil {
		return measure.Layout{}, nil, nil, &UsageError{Err: err}
	}
	maxGroup := 0
	for _, g := range layout.Groups {
		maxGroup = max(maxGroup, len(g))
	}
	notes := o.Notes
	if note, err := plan.WholeElements(); err != nil {
		return measure.Layout{}, nil, nil, &UsageError{Err: err}
	} else if note != "" {
		notes = append(notes, note)
	}
	if note, err := measure.EmptyRows(plan.Sizes, cases, minGroup, maxGroup); err != nil {
		return measure.Layout{}, nil, nil, &UsageError{Err: err}
	} else if note != "" {
		notes = append(notes, note)
	}
	if b.Name() == "cpu" {
		if plan.Register > 0 {
			notes = append(notes, "--register: the cpu backend has no library to register buffers with; measured unregistered")
			plan.Register = 0
		}
		if plan.Agg > 1 {
			notes = append(notes, fmt.Sprintf("--agg %d: the cpu backend has no group calls; the %d operations of an iteration run one after another", plan.Agg, plan.Agg))
		}
	}
	if plan.GraphReplays > 0 {
		gb, ok := b.(measure.GraphBackend)
		if !ok {
			return measure.Layout{}, nil, nil, UsageErrorf("--cuda-graph needs the nccl backend (this run uses %s)", b.Name())
		}
		if err := gb.CanCaptureGraphs(); err != nil {
			return measure.Layout{}, nil, nil, UsageErrorf("--cuda-graph: %v", err)
		}
	}
	return layout, cases, notes, nil
}

// memoryReport says what the run's memory went to: the communicators, the
// two buffers per rank, and what the collectives took on top while
// running (device memory on GPUs, host memory on the cpu backend).
func memoryReport(w measure.World, metered bool, m measure.MemoryMeter, used0, peak, buffers int64) *results.MemoryReport {
	rep := &results.MemoryReport{BufferBytes: buffers, LibraryBytes: -1, CollectiveBytes: -1}
	if !metered {
		rep.Note = "this backend does not measure its memory"
		return rep
	}
	rep.LibraryBytes = m.LibraryMemory()
	if used0 >= 0 && peak >= 0 {
		rep.CollectiveBytes = max(peak-used0-buffers, 0)
	}
	return rep
}

// IsFault reports errors that already name their cause and carry their
// exit code: a fault of the world, or a signal.
func IsFault(err error) bool {
	var pe *bootstrap.PeerError
	var se *SignalError
	return errors.As(err, &pe) || errors.As(err, &se)
}

// WorldDevices lists every rank's device, from every process of the world.
func WorldDevices(w measure.World) ([]results.Device, error) {
	var mine []results.Device
	for _, r := range w.Ranks() {
		mine = append(mine, r.Device())
	}
	d, ok := w.(measure.Distributed)
	if !ok || d.Control() == nil {
		return mine, nil
	}
	b, _ := json.Marshal(mine)
	parts, err := d.Control().AllGather(b)
	if err != nil {
		return nil, fmt.Errorf("gathering devices: %w", err)
	}
	var all []results.Device
	for _, p := range parts {
		var ds []results.Device
		if err := json.Unmarshal(p, &ds); err != nil {
			return nil, err
		}
		all = append(all, ds...)
	}
	return all, nil
}

// oneRankNote says why --explain shows no algorithm on a world of one
// rank of backend (1x H200, NCCL 2.28.3: one rank logs no tuning line, and
// the column stayed empty, unexplained).
func oneRankNote(backend string) string {
	lib := ""
	if backend == "nccl" {
		lib = " (NCCL logs none for it)"
	}
	return "no algorithm per row: a world of one rank moves nothing between ranks, so it runs no algorithm to show" + lib + "; --explain needs 2 ranks or more"
}

func (f *System) newDocument(o Bench, p measure.Plan, n int, choice BackendChoice) *results.Document {
	cfg := results.Config{
		Ranks: n, Iters: p.Iters, Warmup: p.Warmup, Check: p.Check, Average: p.Average.String(),
		Seed: p.Seed, Backend: o.Backend, Sizes: p.Sizes, Root: "all",
		IterStats: p.IterStats, CUDAGraph: p.GraphReplays,
		Blocking: p.Blocking, Misalign: p.Misalign, CPUTime: p.CPUTime, Explain: o.Explain, Bitwise: p.Bitwise,
		Register: []string{"", "local", "symmetric"}[p.Register],
	}
	if p.Agg > 1 {
		cfg.Agg = p.Agg
	}
	if t, ok := choice.Backend.(measure.Threaded); ok {
		cfg.Threads = t.Threads()
	}
	if p.CycleBound() > 1 {
		cfg.Cycles, cfg.Stable = p.CycleBound(), p.Stable
	}
	for _, c := range p.Collectives {
		cfg.Collectives = append(cfg.Collectives, c.String())
	}
	for _, t := range p.DTypes {
		cfg.DTypes = append(cfg.DTypes, t.String())
	}
	for _, op := range p.Ops {
		cfg.Ops = append(cfg.Ops, op.String())
	}
	if p.Roots != nil {
		cfg.Root = strconv.Itoa(p.Roots[0])
	}
	switch {
	case p.OutOfPlace && p.InPlace:
		cfg.Mode = "both"
	case p.InPlace:
		cfg.Mode = "in-place"
	default:
		cfg.Mode = "out-of-place"
	}
	return &results.Document{
		Schema:        results.Schema,
		SchemaVersion: results.SchemaVersion,
		Tool:          results.Tool{Name: "collbench", Version: o.Tool},
		Command:       f.Args,
		Started:       f.Now(),
		Config:        cfg,
		Results:       []results.Row{},
		Environment:   f.Environment(choice.Backend, choice.Reason),
	}
}

func hasRooted(cs []measure.Collective) bool {
	for _, c := range cs {
		if c.Rooted() {
			return true
		}
	}
	return false
}

// DefaultSizes is the sweep a run measures when it names no sizes.
const DefaultSizes = measure.DefaultSizes

// DefaultRunFlags are the bounds of every wait a run makes when the caller
// sets none: the device of the local rank, two minutes to form a world,
// the watchdog's bound, and the heartbeat's.
func DefaultRunFlags() RunFlags {
	return RunFlags{Device: -1, BootstrapTimeout: 2 * time.Minute, Timeout: watchdog.DefaultTimeout, HeartbeatTimeout: bootstrap.DefaultSilence}
}

// DefaultBench is a benchmark as collbench runs it when nothing else is
// asked: float sum allreduce at DefaultSizes, both modes, 20 timed and 5
// untimed iterations, every row checked once, ranks' times averaged, on
// the backend found (NCCL, else the cpu). The command line declares its
// flags' defaults from it, so every way of running a sweep starts alike.
func DefaultBench() Bench {
	sizes, err := measure.ParseSizes(DefaultSizes)
	if err != nil {
		panic("engine: DefaultSizes does not parse: " + err.Error()) // a constant of this package
	}
	float, err := measure.ParseDTypes("float")
	if err != nil {
		panic("engine: the float type does not parse: " + err.Error()) // a constant
	}
	return Bench{Backend: "auto", RunFlags: DefaultRunFlags(),
		Plan: measure.Plan{Collectives: []measure.Collective{measure.AllReduce}, DTypes: float,
			Ops: []measure.ReduceOp{measure.Sum}, Roots: []int{0}, Sizes: sizes, Iters: 20, Warmup: 5, Check: 1,
			OutOfPlace: true, InPlace: true, Average: measure.AvgMean, Seed: 1, Agg: 1, Cycles: 1}}
}
