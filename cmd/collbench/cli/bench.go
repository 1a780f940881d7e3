package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"collbench/engine"
	"collbench/measure"
	"collbench/report"
	"collbench/results"
)

// longPlan is the least time of a plan that is said before it runs.
const longPlan = 10 * time.Minute

// BenchOptions are the flags every collective command shares.
type BenchOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	// Spec is the plan in the user's words (the flags bind to it; run
	// --config fills it from YAML); Spec.Plan resolves it.
	measure.Spec
	CollectivesFlag string // sweep only

	Ranks    int
	RankList string
	Memory   bool
	Explain  bool
	// MaxTime refuses a plan whose least possible time is longer (0: no limit).
	MaxTime time.Duration

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

func addBenchFlags(fs *pflag.FlagSet, o *BenchOptions) {
	d := engine.DefaultBench()
	fs.StringVar(&o.Sizes, "sizes", "", "message sizes: list and ranges, e.g. 8,1K,1M or 8:1G (doubling), 1M:64M:x4, 1M:8M:+1M (default "+engine.DefaultSizes+")")
	fs.StringVarP(&o.MinBytes, "minbytes", "b", "", "smallest size, as NCCL's benchmark -b (with -e and -f or -i)")
	fs.StringVarP(&o.MaxBytes, "maxbytes", "e", "", "largest size, as NCCL's benchmark -e")
	fs.Int64VarP(&o.StepFactor, "stepfactor", "f", 2, "size multiplier between -b and -e")
	fs.StringVarP(&o.StepBytes, "stepbytes", "i", "", "size increment between -b and -e (instead of -f)")
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.StringVarP(&o.DType, "dtype", "d", d.Plan.DTypes[0].String(), "element type: "+strings.Join(measure.DTypeNames(), ", ")+" (aliases fp32, fp16, bf16, ...), a comma list, or all")
	fs.StringVar(&o.Op, "op", d.Plan.Ops[0].String(), "reduction: sum, prod, max, min, avg, a comma list, or all")
	fs.StringVarP(&o.Root, "root", "r", strconv.Itoa(d.Plan.Roots[0]), "root rank of broadcast and reduce: N or all")
	fs.IntVarP(&o.Iters, "iters", "n", d.Plan.Iters, "timed iterations per size")
	fs.IntVarP(&o.Warmup, "warmup", "w", d.Plan.Warmup, "untimed iterations before timing each size")
	fs.IntVarP(&o.Check, "check", "c", d.Plan.Check, "verification passes per size, each with fresh inputs (0 = off)")
	fs.StringVar(&o.Mode, "mode", modeWord(d.Plan), "both, out-of-place or in-place")
	fs.StringVarP(&o.Average, "average", "a", d.Plan.Average.String(), "how ranks' times combine: mean, min, max or rank0")
	fs.Uint64Var(&o.Seed, "seed", d.Plan.Seed, "seed of the verification inputs")
	fs.StringVar(&o.RankList, "rank-list", "", "split the ranks into groups that run concurrently, each with its own communicator:\n"+measure.PresetHelp)
	fs.BoolVar(&o.IterStats, "iter-stats", false, "also time each iteration on its own (GPU events) and show p50, p99, min, max and CV")
	fs.IntVar(&o.CUDAGraph, "cuda-graph", 0, "capture the iterations in a CUDA graph once and replay it N times (nccl backend)")
	fs.IntVarP(&o.Agg, "agg", "m", d.Plan.Agg, "operations issued per timed iteration as one group call (ncclGroupStart/End); time is per operation")
	fs.IntVarP(&o.Blocking, "blocking", "z", 0, "synchronise after every iteration: 1 with a barrier, 2 without, 3 with the barrier left out of the time")
	fs.IntVarP(&o.Misalign, "misalign", "u", 0, "offset both buffers by N elements from their aligned start")
	fs.BoolVarP(&o.CPUTime, "cputime", "C", false, "also report the host time spent issuing each operation")
	fs.IntVarP(&o.Cycles, "cycles", "N", d.Plan.Cycles, "repeat the whole sweep N times; each row shows the median cycle and the range")
	fs.BoolVar(&o.Stable, "stable", false, fmt.Sprintf("repeat the whole sweep until it is stable: at least %d cycles, until one moves no row's median by more than %g%%, at most --cycles (default %d); for runs to compare", measure.StableMinCycles, measure.StableTolerance*100, measure.StableMaxCycles))
	fs.StringVarP(&o.Register, "register", "R", "none", "register the buffers with NCCL: none, local (ncclCommRegister) or symmetric (ncclCommWindowRegister, NCCL 2.27+); also 0, 1, 2")
	fs.IntVar(&o.Bitwise, "bitwise", 0, "run each row's reductions of floating-point types N more times on the same random inputs and compare the outputs bit for bit, run to run and across ranks (any difference fails, exit 1)")
	fs.BoolVarP(&o.Memory, "memory", "M", false, "report memory: what the communicators took, the buffers, and what the collectives took on top")
	fs.BoolVar(&o.Explain, "explain", false, "show which algorithm each row ran with: NCCL's algorithm, protocol and channels (from its tuning log, in a separate probe), or the cpu backend's")
	fs.DurationVar(&o.MaxTime, "max-time", measure.DefaultMaxTime, "refuse a plan whose counts and sizes could not finish in less than this, at 1 us per operation and again at the time one took while warming up (0 = no limit)")
	fs.StringVar(&o.Format, "format", "table", "output format on stdout: table, json or csv")
	fs.StringVarP(&o.Output, "output", "o", "", "also write the results to FILE (format from --format if given, else by extension: .csv, .txt table, otherwise JSON)")
	fs.StringVar(&o.Backend, "backend", d.Backend, "auto, cpu, nccl or mpi (bin/collbench-mpi under mpirun)")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load (default: $COLLBENCH_NCCL_LIB, then the dynamic linker's search)")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks", "iters", "agg", "cycles", "bitwise")
	atLeast(fs, "2", "stepfactor")
	atLeast(fs, "0", "warmup", "check", "misalign", "cuda-graph", "blocking")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no progress bar and no backend notice on stderr")
}

// modeWord is the --mode word for the plan's modes.
func modeWord(p measure.Plan) string {
	switch {
	case p.OutOfPlace && p.InPlace:
		return "both"
	case p.InPlace:
		return "in-place"
	}
	return "out-of-place"
}

// benchDefaults returns options holding every flag's default, as a command
// line that gives none of them would.
func benchDefaults(f *Factory) *BenchOptions {
	o := &BenchOptions{IO: f.IO, Factory: f}
	addBenchFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), o)
	return o
}

// benchCommands returns one command per collective.
func benchCommands(f *Factory) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range measure.AllCollectives() {
		out = append(out, NewCmdCollective(f, c, nil))
	}
	return out
}

// NewCmdCollective builds the command for one collective. runF replaces
// benchRun in tests.
func NewCmdCollective(f *Factory, c measure.Collective, runF func(*BenchOptions) error) *cobra.Command {
	o := &BenchOptions{IO: f.IO, Factory: f, Spec: measure.Spec{Collectives: []measure.Collective{c}}}
	cmd := &cobra.Command{
		Use:     c.String(),
		Aliases: c.Aliases(),
		Short:   fmt.Sprintf("Sweep %s: %s", c, c.Outcome()),
		Args:    noArgs,
		Example: fmt.Sprintf("  collbench %s --sizes 8:1G\n  collbench %s -b 8 -e 128M -f 2 --dtype all -o run.json", c, c),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			o.formatSet = cmd.Flags().Changed("format")
			if err := flagsApply(cmd, o.Collectives); err != nil {
				return err
			}
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
			cs, err := measure.ParseCollectives(o.CollectivesFlag)
			if err != nil {
				return &engine.UsageError{Err: err}
			}
			o.Collectives = cs
			if err := flagsApply(cmd, cs); err != nil {
				return err
			}
			if runF != nil {
				return runF(o)
			}
			return benchRun(o)
		},
	}
	cmd.Flags().StringVar(&o.CollectivesFlag, "collectives", "all", "comma list of collectives, or all: "+strings.Join(measure.CollectiveNames(), ", "))
	addBenchFlags(cmd.Flags(), o)
	cmd.MarkFlagsMutuallyExclusive("stepfactor", "stepbytes")
	return cmd
}

// flagsApply refuses --root or --op given for collectives none of which
// has a root or reduces: ignored without a word, the run is not the one
// asked for.
func flagsApply(cmd *cobra.Command, cs []measure.Collective) error {
	for _, fl := range []struct {
		name, what, which string
		has               func(measure.Collective) bool
	}{
		{"root", "has a root", "broadcast, reduce, gather and scatter", measure.Collective.Rooted},
		{"op", "reduces", "allreduce, reduce and reduce-scatter", measure.Collective.Reduces},
	} {
		if !cmd.Flags().Changed(fl.name) || slices.ContainsFunc(cs, fl.has) {
			continue
		}
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = c.String()
		}
		return engine.UsageErrorf("--%s: none of %s %s (it applies to %s): leave it out", fl.name, strings.Join(names, ", "), fl.what, fl.which)
	}
	return nil
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return engine.UsageErrorf("%s takes no arguments, got %q (see '%s --help')", cmd.CommandPath(), args[0], cmd.CommandPath())
	}
	return nil
}

// benchRun runs the benchmark the options describe: the engine measures,
// this writes -o as rows arrive, shows progress and prints the table.
func benchRun(o *BenchOptions) error {
	if o.Ranks < 0 {
		return engine.UsageErrorf("invalid --ranks %d: must be at least 1", o.Ranks)
	}
	plan, err := o.Plan()
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	format, err := report.ParseFormat(o.Format)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	var out *resultFile
	rank0 := false
	progress := newProgress(o.IO)
	progress.quiet = o.Quiet
	b := engine.Bench{Plan: plan, Backend: o.Backend, NCCLLib: o.NCCLLib, Ranks: o.Ranks, RankList: o.RankList,
		AllCollectives: o.allCollectives(), Explain: o.Explain, Memory: o.Memory, MaxTime: o.MaxTime, RunFlags: o.RunFlags,
		Notes: o.notes, Tool: Version, OnProgress: progress.update}
	b.OnEstimate = func(floor, perOp time.Duration) {
		// A long plan is said before its first row, with what it rests on.
		if floor >= longPlan && !o.Quiet {
			fmt.Fprintf(o.IO.ErrOut, "collbench: this plan takes at least %s here (an operation took %v while warming up); each row reaches -o as it is measured, and Ctrl-C keeps them\n",
				floor.Round(time.Second), perOp.Round(10*time.Nanosecond))
		}
	}
	b.OnReady = func(choice engine.BackendChoice, isRank0 bool) error {
		rank0 = isRank0
		if o.Output != "" && rank0 {
			t, err := outputTarget("--output", o.Output)
			if err != nil {
				return err
			}
			out = &resultFile{target: t, format: o.fileFormat(format), out: o.IO.Out, errOut: o.IO.ErrOut}
		}
		if choice.Auto && rank0 && !o.Quiet && !o.hideNotice {
			fmt.Fprintf(o.IO.ErrOut, "collbench: backend %s (%s)\n", choice.Backend.Name(), choice.Reason)
		}
		return nil
	}
	// last is the document as of its latest row, for an exit that cannot
	// wait for the run (read from the signal's goroutine).
	var last atomic.Pointer[results.Document]
	b.OnDocument = func(doc *results.Document, i int, row results.Row) {
		last.Store(doc)
		o.document = doc
		out.set(doc, i, row)
		if o.onDocument != nil {
			o.onDocument(doc)
		}
	}
	// A process that exits at once (a run that did not stop after a
	// signal or an abort) still writes why into --output.
	defer engine.OnExit(func() {
		if d := last.Load(); d != nil && out != nil && rank0 {
			if reason := engine.ExitReason(); reason != "" && d.Error == "" {
				d.Error = reason
			}
			_ = out.finish(d)
		}
	})()
	doc, runErr := o.Factory.RunBench(o.Ctx, b)
	progress.done()
	if doc == nil {
		return runErr
	}
	o.document = doc
	if o.onDocument != nil {
		o.onDocument(doc)
	}
	if !rank0 {
		return runErr
	}
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
	return runErr
}
