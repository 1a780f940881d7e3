package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"collbench/bootstrap"
	"collbench/dtype"
	"collbench/engine"
	"collbench/internal/outfile"
	"collbench/report"
	"collbench/results"
	"collbench/suites"
	"collbench/watchdog"
)

// BenchOptions are the flags every collective command shares.
type BenchOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	Collectives     []suites.Collective
	CollectivesFlag string // sweep only

	Sizes      string
	MinBytes   string
	MaxBytes   string
	StepFactor int64
	StepBytes  string

	Ranks   int
	DType   string
	Op      string
	Root    string
	Iters   int
	Warmup  int
	Check   int
	Mode    string
	Average string
	Seed    uint64

	IterStats bool
	CUDAGraph int
	RankList  string

	// NCCL benchmark features.
	Agg      int
	Blocking int
	Misalign int
	CPUTime  bool
	Cycles   int
	Register string
	Memory   bool
	Explain  bool

	engine.RunFlags
	Quiet bool
	// hideNotice drops the backend notice (run prints it for its first suite only).
	hideNotice bool

	Format    string
	formatSet bool
	Output    string
	Backend   string
	NCCLLib   string

	// onDocument, if set, receives the document after every row and at the
	// end (run keeps its results file current with it).
	onDocument func(*results.Document)
	// document is the run's document once benchRun returns.
	document *results.Document
	// notes collects what the run does differently from what was asked.
	notes []string
}

// allCollectives reports whether the collectives were asked for as "all".
func (o *BenchOptions) allCollectives() bool {
	for _, c := range strings.Split(o.CollectivesFlag, ",") {
		if strings.EqualFold(strings.TrimSpace(c), "all") {
			return true
		}
	}
	return false
}

const defaultSizes = "8:32M"

func addBenchFlags(fs *pflag.FlagSet, o *BenchOptions) {
	fs.StringVar(&o.Sizes, "sizes", "", "message sizes: list and ranges, e.g. 8,1K,1M or 8:1G (doubling), 1M:64M:x4, 1M:8M:+1M (default "+defaultSizes+")")
	fs.StringVarP(&o.MinBytes, "minbytes", "b", "", "smallest size, as NCCL's benchmark -b (with -e and -f or -i)")
	fs.StringVarP(&o.MaxBytes, "maxbytes", "e", "", "largest size, as NCCL's benchmark -e")
	fs.Int64VarP(&o.StepFactor, "stepfactor", "f", 2, "size multiplier between -b and -e")
	fs.StringVarP(&o.StepBytes, "stepbytes", "i", "", "size increment between -b and -e (instead of -f)")
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.StringVarP(&o.DType, "dtype", "d", "float", "element type: "+strings.Join(dtype.Names(), ", ")+" (aliases fp32, fp16, bf16, ...), a comma list, or all")
	fs.StringVar(&o.Op, "op", "sum", "reduction: sum, prod, max, min, avg, a comma list, or all")
	fs.StringVarP(&o.Root, "root", "r", "0", "root rank of broadcast and reduce: N or all")
	fs.IntVarP(&o.Iters, "iters", "n", 20, "timed iterations per size")
	fs.IntVarP(&o.Warmup, "warmup", "w", 5, "untimed iterations before timing each size")
	fs.IntVarP(&o.Check, "check", "c", 1, "verification passes per size, each with fresh inputs (0 = off)")
	fs.StringVar(&o.Mode, "mode", "both", "both, out-of-place or in-place")
	fs.StringVarP(&o.Average, "average", "a", "mean", "how ranks' times combine: mean, min, max or rank0")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the verification inputs")
	fs.StringVar(&o.RankList, "rank-list", "", "split the ranks into groups that run concurrently, each with its own communicator:\n"+suites.PresetHelp)
	fs.BoolVar(&o.IterStats, "iter-stats", false, "also time each iteration on its own (GPU events) and show p50, p99, min, max and CV")
	fs.IntVar(&o.CUDAGraph, "cuda-graph", 0, "capture the iterations in a CUDA graph once and replay it N times (nccl backend)")
	fs.IntVarP(&o.Agg, "agg", "m", 1, "operations issued per timed iteration as one group call (ncclGroupStart/End); time is per operation")
	fs.IntVarP(&o.Blocking, "blocking", "z", 0, "synchronise after every iteration: 1 with a barrier, 2 without, 3 with the barrier left out of the time")
	fs.IntVarP(&o.Misalign, "misalign", "u", 0, "offset both buffers by N elements from their aligned start")
	fs.BoolVarP(&o.CPUTime, "cputime", "C", false, "also report the host time spent issuing each operation")
	fs.IntVarP(&o.Cycles, "cycles", "N", 1, "repeat the whole sweep N times; each row shows the median cycle and the range")
	fs.StringVarP(&o.Register, "register", "R", "none", "register the buffers with NCCL: none, local (ncclCommRegister) or symmetric (ncclCommWindowRegister, NCCL 2.27+); also 0, 1, 2")
	fs.BoolVarP(&o.Memory, "memory", "M", false, "report memory: what the communicators took, the buffers, and what the collectives took on top")
	fs.BoolVar(&o.Explain, "explain", false, "show which algorithm each row ran with: NCCL's algorithm, protocol and channels (from its tuning log, in a separate probe), or the cpu backend's")
	fs.StringVar(&o.Format, "format", "table", "output format on stdout: table, json or csv")
	fs.StringVarP(&o.Output, "output", "o", "", "also write the results to FILE (format from --format if given, else by extension: .csv, .txt table, otherwise JSON)")
	fs.StringVar(&o.Backend, "backend", "auto", "auto, cpu or nccl")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load (default: $COLLBENCH_NCCL_LIB, then the dynamic linker's search)")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks", "iters", "agg", "cycles")
	atLeast(fs, "2", "stepfactor")
	atLeast(fs, "0", "warmup", "check", "misalign", "cuda-graph", "blocking")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no progress bar and no backend notice on stderr")
}

// benchCommands returns one command per collective.
func benchCommands(f *Factory) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range suites.AllCollectives() {
		out = append(out, NewCmdCollective(f, c, nil))
	}
	return out
}

var collectiveShort = map[suites.Collective]string{
	suites.AllReduce:     "Sweep allreduce: every rank ends with the reduction of all inputs",
	suites.AllGather:     "Sweep allgather: every rank ends with all ranks' inputs, in rank order",
	suites.ReduceScatter: "Sweep reduce-scatter: rank r ends with part r of the reduction",
	suites.Broadcast:     "Sweep broadcast: every rank ends with the root's input",
	suites.Reduce:        "Sweep reduce: the root ends with the reduction of all inputs",
	suites.AllToAll:      "Sweep alltoall: rank r sends its part p to rank p",
	suites.SendRecv:      "Sweep send/recv: each rank sends to rank+1 and receives from rank-1",
	suites.Gather:        "Sweep gather: the root ends with all ranks' inputs, in rank order",
	suites.Scatter:       "Sweep scatter: rank r ends with part r of the root's input",
	suites.AllToAllV:     "Sweep alltoallv: alltoall with uneven counts between every pair of ranks",
	suites.HyperCube:     "Sweep hypercube: log2(n) rounds, each exchanging with rank XOR 2^k",
}

// NewCmdCollective builds the command for one collective. runF replaces
// benchRun in tests.
func NewCmdCollective(f *Factory, c suites.Collective, runF func(*BenchOptions) error) *cobra.Command {
	o := &BenchOptions{IO: f.IO, Factory: f, Collectives: []suites.Collective{c}}
	cmd := &cobra.Command{
		Use:     c.String(),
		Aliases: c.Aliases(),
		Short:   collectiveShort[c],
		Args:    noArgs,
		Example: fmt.Sprintf("  collbench %s --sizes 8:1G\n  collbench %s -b 8 -e 128M -f 2 --dtype all -o run.json", c, c),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			o.formatSet = cmd.Flags().Changed("format")
			if runF != nil {
				return runF(o)
			}
			return benchRun(o)
		},
	}
	addBenchFlags(cmd.Flags(), o)
	cmd.MarkFlagsMutuallyExclusive("stepfactor", "stepbytes")
	return cmd
}

// NewCmdSweep builds `collbench sweep`, which runs several collectives in one process.
func NewCmdSweep(f *Factory, runF func(*BenchOptions) error) *cobra.Command {
	o := &BenchOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:     "sweep",
		Short:   "Sweep several collectives in one process (--collectives all)",
		Args:    noArgs,
		Example: "  collbench sweep --collectives all --sizes 8:4G\n  collbench sweep --collectives allreduce,allgather -o sweep.json",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			o.formatSet = cmd.Flags().Changed("format")
			cs, err := suites.ParseCollectives(o.CollectivesFlag)
			if err != nil {
				return &engine.UsageError{Err: err}
			}
			o.Collectives = cs
			if runF != nil {
				return runF(o)
			}
			return benchRun(o)
		},
	}
	cmd.Flags().StringVar(&o.CollectivesFlag, "collectives", "all", "comma list of collectives, or all: "+strings.Join(suites.CollectiveNames(), ", "))
	addBenchFlags(cmd.Flags(), o)
	cmd.MarkFlagsMutuallyExclusive("stepfactor", "stepbytes")
	return cmd
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return engine.UsageErrorf("%s takes no arguments, got %q (see '%s --help')", cmd.CommandPath(), args[0], cmd.CommandPath())
	}
	return nil
}

// sizes resolves --sizes or the -b/-e/-f/-i flags.
func (o *BenchOptions) sizes() ([]int64, error) {
	bounds := o.MinBytes != "" || o.MaxBytes != "" || o.StepBytes != ""
	if bounds && o.Sizes != "" {
		return nil, fmt.Errorf("use either --sizes or -b/-e/-f/-i, not both")
	}
	if bounds {
		if o.MinBytes == "" {
			return nil, fmt.Errorf("-e/-i need -b (the smallest size)")
		}
		return suites.SizesFromBounds(o.MinBytes, o.MaxBytes, o.StepFactor, o.StepBytes)
	}
	spec := o.Sizes
	if spec == "" {
		spec = defaultSizes
	}
	return suites.ParseSizes(spec)
}

// parseList parses a comma list of values or "all". A value listed twice
// under any spelling (float,fp32) is kept once, in its first place, as
// overlapping size ranges are, so no row is measured twice.
func parseList[T comparable](s string, all []T, parse func(string) (T, error)) ([]T, bool, error) {
	var out []T
	seen := map[T]bool{}
	add := func(v T) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	isAll := false
	for _, part := range strings.Split(s, ",") {
		if strings.EqualFold(strings.TrimSpace(part), "all") {
			for _, v := range all {
				add(v)
			}
			isAll = true
			continue
		}
		v, err := parse(part)
		if err != nil {
			return nil, false, err
		}
		add(v)
	}
	return out, isAll, nil
}

// plan turns the flags into a plan; n is the rank count.
func (o *BenchOptions) plan() (suites.Plan, error) {
	var p suites.Plan
	var err error
	p.Collectives = o.Collectives
	if p.Sizes, err = o.sizes(); err != nil {
		return p, err
	}
	var allT, allO bool
	if p.DTypes, allT, err = parseList(o.DType, dtype.All(), dtype.Parse); err != nil {
		return p, err
	}
	if p.Ops, allO, err = parseList(o.Op, suites.AllOps(), suites.ParseOp); err != nil {
		return p, err
	}
	p.SkipUnsupported = allT || allO
	if r := strings.TrimSpace(o.Root); !strings.EqualFold(r, "all") {
		v, err := strconv.Atoi(r)
		if err != nil {
			return p, fmt.Errorf("invalid --root %q (use a rank number or all)", o.Root)
		}
		p.Roots = []int{v}
	}
	switch strings.ToLower(o.Mode) {
	case "both":
		p.OutOfPlace, p.InPlace = true, true
	case "out-of-place", "oop", "outofplace":
		p.OutOfPlace = true
	case "in-place", "ip", "inplace":
		p.InPlace = true
	default:
		return p, fmt.Errorf("unknown --mode %q (valid: both, out-of-place, in-place)", o.Mode)
	}
	if p.Average, err = suites.ParseAverage(o.Average); err != nil {
		return p, err
	}
	if o.Ranks < 0 {
		return p, fmt.Errorf("invalid --ranks %d: must be at least 1", o.Ranks)
	}
	p.Iters, p.Warmup, p.Check, p.Seed = o.Iters, o.Warmup, o.Check, o.Seed
	p.IterStats, p.GraphReplays = o.IterStats, o.CUDAGraph
	p.Agg, p.Blocking, p.Misalign, p.CPUTime, p.Cycles = o.Agg, o.Blocking, o.Misalign, o.CPUTime, o.Cycles
	if o.Agg < 1 {
		return p, fmt.Errorf("invalid --agg %d: must be 1 or more", o.Agg)
	}
	if o.Cycles < 1 {
		return p, fmt.Errorf("invalid --cycles %d: must be 1 or more", o.Cycles)
	}
	switch strings.ToLower(strings.TrimSpace(o.Register)) {
	case "none", "0", "":
	case "local", "1":
		p.Register = 1
	case "symmetric", "2":
		p.Register = 2
	default:
		return p, fmt.Errorf("unknown --register %q (valid: none, local, symmetric, or 0, 1, 2)", o.Register)
	}
	return p, nil
}

// emptyRows finds rows whose size is below one element per rank, so they
// move no data. If every row is such a row the run is refused; otherwise a
// note says how many (NCCL's benchmark prints them too, with count 0).
func emptyRows(sizes []int64, cases []suites.Case, minGroup, maxGroup int) (string, error) {
	var empty, total int
	example := ""
	allEmpty := true
	for _, c := range cases {
		for _, sz := range sizes {
			total++
			if suites.GeometryFor(c.Coll, sz, c.DType.Size(), minGroup, 0).BufferElems() > 0 {
				allEmpty = false
			}
			if suites.GeometryFor(c.Coll, sz, c.DType.Size(), maxGroup, 0).BufferElems() == 0 {
				empty++
				if example == "" {
					example = fmt.Sprintf("%s %s %s on %d ranks", c.Coll, c.DType, report.HumanBytes(sz), maxGroup)
				}
			}
		}
	}
	if total > 0 && allEmpty {
		c := cases[0]
		need := int64(c.DType.Size())
		for suites.GeometryFor(c.Coll, need, c.DType.Size(), minGroup, 0).BufferElems() == 0 {
			need *= 2
		}
		return "", fmt.Errorf("every row would move no data: the sizes are below one %s per rank (%s needs at least %s on %d ranks); use larger --sizes",
			c.DType, c.Coll, report.HumanBytes(need), minGroup)
	}
	if empty > 0 {
		return fmt.Sprintf("%d of %d rows move no data: their size is below one element per rank (e.g. %s); they are timed with count 0, as NCCL's benchmark does", empty, total, example), nil
	}
	return "", nil
}

// outputFormat resolves what -o FILE receives.
func (o *BenchOptions) fileFormat(stdout report.Format) report.Format {
	if o.formatSet {
		return stdout
	}
	switch strings.ToLower(filepath.Ext(o.Output)) {
	case ".csv":
		return report.FormatCSV
	case ".txt":
		return report.FormatTable
	}
	return report.FormatJSON
}

func benchRun(o *BenchOptions) error {
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	board := watchdog.NewBoard()
	ctx = watchdog.WithBoard(ctx, board)
	f := o.Factory
	plan, err := o.plan()
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	format, err := report.ParseFormat(o.Format)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	ss, err := f.StartSession(ctx, o.Backend, o.NCCLLib, o.Ranks, o.RunFlags, func(n int) error {
		if err := plan.Validate(n); err != nil {
			return &engine.UsageError{Err: err}
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer ss.Close()
	choice, b, launch, n, pw, hosts := ss.Choice, ss.Choice.Backend, ss.Launch, ss.N, ss.PW, ss.Hosts
	layout, err := suites.ParseLayout(o.RankList, n, hosts)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := suites.CheckGroups(plan.Collectives, layout.Groups); err != nil {
		if !o.allCollectives() {
			return &engine.UsageError{Err: err}
		}
		// "all" means all that can run here.
		plan.Collectives = slices.DeleteFunc(plan.Collectives, suites.Collective.PowerOfTwo)
		o.notes = append(o.notes, "hypercube is left out of all: it needs groups whose sizes are powers of two")
	}
	minGroup := n
	for _, g := range layout.Groups {
		minGroup = min(minGroup, len(g))
	}
	for _, r := range plan.Roots {
		if r >= minGroup && hasRooted(plan.Collectives) {
			return engine.UsageErrorf("invalid --root %d: the smallest group of --rank-list %s has %d ranks (roots are group ranks)", r, o.RankList, minGroup)
		}
	}
	cases, err := plan.Cases(b, minGroup)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	maxGroup := 0
	for _, g := range layout.Groups {
		maxGroup = max(maxGroup, len(g))
	}
	notes := o.notes
	if note, err := emptyRows(plan.Sizes, cases, minGroup, maxGroup); err != nil {
		return &engine.UsageError{Err: err}
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
		gb, ok := b.(suites.GraphBackend)
		if !ok {
			return engine.UsageErrorf("--cuda-graph needs the nccl backend (this run uses %s)", b.Name())
		}
		if err := gb.CanCaptureGraphs(); err != nil {
			return engine.UsageErrorf("--cuda-graph: %v", err)
		}
	}
	var out *resultFile
	if o.Output != "" && pw.Rank0() {
		t, err := outputTarget("--output", o.Output)
		if err != nil {
			return err
		}
		out = &resultFile{target: t, format: o.fileFormat(format), out: o.IO.Out, errOut: o.IO.ErrOut}
	}
	if choice.Auto && pw.Rank0() && !o.Quiet && !o.hideNotice {
		fmt.Fprintf(o.IO.ErrOut, "collbench: backend %s (%s)\n", b.Name(), choice.Reason)
	}

	doc := o.newDocument(plan, n, choice)
	doc.Notes = notes
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
	o.document = doc
	probe, probeNote, err := o.probeAlgorithms(ctx, ss, plan, cases, layout)
	if err != nil {
		return err
	}
	if probeNote != "" {
		doc.Notes = append(doc.Notes, probeNote)
	}
	choices := probe.ByRow()
	world, err := f.OpenWorld(ctx, b, pw, n, o.Device)
	if err != nil {
		return err
	}
	defer world.Close()
	if doc.Environment.Backend.Devices, err = worldDevices(world); err != nil {
		return &engine.RunError{Err: err}
	}
	switch {
	case b.Name() == "nccl" && pw.Rank0():
		doc.Topology = f.resultTopology(hosts, doc.Environment.Backend.Version)
	case b.Name() == "cpu":
		doc.Topology = f.cpuTopology(ss)
	}
	g := f.StartGuard(ctx, cancel, ss, world, board, o.Timeout, doc.Environment.Backend.Devices)
	defer g.Close()
	rn := &suites.Runner{World: world, Plan: plan, Cases: cases, Layout: layout, Board: board}
	meter, metered := world.(suites.MemoryMeter)
	var used0, usedPeak int64 = -1, -1
	if o.Memory && metered {
		used0 = meter.UsedMemory()
	}
	progress := newProgress(o.IO)
	progress.quiet = o.Quiet
	if pw.Rank0() {
		rn.OnProgress = progress.update
	}
	rn.OnRow = func(i int, row results.Row) {
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
		out.set(doc, i, row)
		if o.onDocument != nil {
			o.onDocument(doc)
		}
	}
	rows, runErr := rn.Run(ctx)
	progress.done()
	var tooLarge *suites.SizesTooLargeError
	if errors.As(runErr, &tooLarge) {
		return &engine.UsageError{Err: runErr} // refused before anything ran
	}
	if runErr != nil {
		runErr = g.Cause(runErr, len(rows))
		if pw.Multi() && !isFault(runErr) {
			pw.Ctl.Abort(runErr)
		}
	}
	doc.Finished = f.Now()
	if runErr != nil {
		doc.Error = runErr.Error()
	}
	if o.Memory {
		doc.Memory = memoryReport(world, metered, meter, used0, usedPeak, rn.BufferBytes())
	}
	doc.Summary = results.Summarize(doc.Results, runErr != nil)
	if o.onDocument != nil {
		o.onDocument(doc)
	}
	if pw.Rank0() {
		if err := out.finish(doc); err != nil {
			return err
		}
		stdout := format
		if out != nil && !o.formatSet {
			stdout = report.FormatTable
		}
		// With --output on standard output the document is what goes there.
		if !out.toStdout() {
			if err := report.Write(o.IO.Out, doc, stdout); err != nil {
				return &engine.RunError{Err: fmt.Errorf("writing results: %w", err)}
			}
		}
	}
	switch {
	case isFault(runErr):
		return runErr
	case runErr != nil:
		return &engine.RunError{Err: runErr}
	case doc.Summary.WrongTotal > 0:
		return &engine.CheckFailedError{Msg: fmt.Sprintf("verification failed: %d wrong elements", doc.Summary.WrongTotal)}
	}
	return nil
}

// memoryReport says what the run's memory went to: the communicators, the
// two buffers per rank, and what the collectives took on top while
// running (device memory on GPUs, host memory on the cpu backend).
func memoryReport(w suites.World, metered bool, m suites.MemoryMeter, used0, peak, buffers int64) *results.MemoryReport {
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

// isFault reports errors that already name their cause and carry their
// exit code: a fault of the world, or a signal.
func isFault(err error) bool {
	var pe *bootstrap.PeerError
	var se *engine.SignalError
	return errors.As(err, &pe) || errors.As(err, &se)
}

// resultFile keeps --output current: after every row the whole document is
// written to a temporary file beside it and renamed over it, so the file
// always holds a valid document with every row measured so far, whenever
// the process is killed. An existing file is replaced only once the run
// has a row to put there. A stream (a pipe, a device, standard output)
// cannot be rewritten: it gets the whole document once, at the end.
type resultFile struct {
	target *outfile.Target
	format report.Format
	out    io.Writer // the command's standard output
	errOut io.Writer
	enc    results.Encoder
	failed bool
}

func (r *resultFile) render(doc *results.Document) func(io.Writer) error {
	if r.format == report.FormatJSON {
		return func(w io.Writer) error { return r.enc.Write(w, doc) }
	}
	return func(w io.Writer) error { return report.Write(w, doc, r.format) }
}

// toStdout says whether the document goes to standard output.
func (r *resultFile) toStdout() bool { return r != nil && r.target.IsStdout() }

// set writes the document after row was set at index i of its results
// (appended, or measured again by a later cycle).
func (r *resultFile) set(doc *results.Document, i int, row results.Row) {
	if r == nil {
		return
	}
	if err := r.enc.Set(i, row); err == nil && r.target.Kind == outfile.Regular {
		err = r.target.Write(false, r.render(doc))
		if err != nil && !r.failed {
			r.failed = true
			fmt.Fprintf(r.errOut, "collbench: cannot update --output: %v (will try again at the end)\n", err)
		}
	}
}

// finish writes the final document, synced to disk; with no row at all an
// existing file is left as it was.
func (r *resultFile) finish(doc *results.Document) error {
	if r == nil {
		return nil
	}
	if len(doc.Results) == 0 && r.target.Kind == outfile.Regular {
		if _, err := os.Stat(r.target.Path); err == nil {
			fmt.Fprintf(r.errOut, "collbench: no row was measured; %s is left as it was\n", r.target.Given)
			return nil
		}
	}
	return writeTarget(r.out, r.target, true, r.render(doc))
}

// worldDevices lists every rank's device, from every process of the world.
func worldDevices(w suites.World) ([]results.Device, error) {
	var mine []results.Device
	for _, r := range w.Ranks() {
		mine = append(mine, r.Device())
	}
	d, ok := w.(suites.Distributed)
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

func (o *BenchOptions) newDocument(p suites.Plan, n int, choice engine.BackendChoice) *results.Document {
	f := o.Factory
	cfg := results.Config{
		Ranks: n, Iters: p.Iters, Warmup: p.Warmup, Check: p.Check, Average: p.Average.String(),
		Seed: p.Seed, Backend: o.Backend, Sizes: p.Sizes, Root: "all",
		IterStats: p.IterStats, CUDAGraph: p.GraphReplays,
		Blocking: p.Blocking, Misalign: p.Misalign, CPUTime: p.CPUTime, Explain: o.Explain,
		Register: []string{"", "local", "symmetric"}[p.Register],
	}
	if p.Agg > 1 {
		cfg.Agg = p.Agg
	}
	if p.Cycles > 1 {
		cfg.Cycles = p.Cycles
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
		Tool:          results.Tool{Name: "collbench", Version: Version},
		Command:       f.Args,
		Started:       f.Now(),
		Config:        cfg,
		Results:       []results.Row{},
		Environment:   f.Environment(choice.Backend, choice.Reason),
	}
}

func hasRooted(cs []suites.Collective) bool {
	for _, c := range cs {
		if c.Rooted() {
			return true
		}
	}
	return false
}

// parseCollectiveList resolves names (or "all") to collectives.
func parseCollectiveList(names []string) ([]suites.Collective, error) {
	return suites.ParseCollectives(strings.Join(names, ","))
}
