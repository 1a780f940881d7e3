package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/measure"
)

// DeterminismOptions are the flags of `collbench determinism`.
type DeterminismOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	Collectives string
	Sizes       string
	DTypes      string
	Runs        int
	Seed        uint64
	DefaultOnly bool
	Ranks       int
	Backend     string
	NCCLLib     string
	Output      string
	TunerFile   string
	Check       string
	Budget      time.Duration
	Quiet       bool
	engine.RunFlags
}

// NewCmdDeterminism builds `collbench determinism`.
func NewCmdDeterminism(f *Factory, runF func(*DeterminismOptions) error) *cobra.Command {
	o := &DeterminismOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "determinism",
		Short: "Find which reductions give the same bits every time, and which algorithms agree",
		Long: `determinism reduces random floating-point inputs (seeded: --seed replays them) and
compares the result's bits: run to run on fresh communicators (--runs), on every rank
that should hold the same result (allreduce), and element by element as the message
grows; for the library's own choice and every algorithm it can be forced to run. It
prints a matrix per collective and type (each cell stable, or the checks that failed),
which choices agree with which, the worst distance from the exact sum in ulps and the
first divergence of each failed check (run, rank, element, bits). -o writes every cell
as JSON; --tuner-file pins, per size, the fastest choice that was stable in every type;
--check FILE runs each size with the choice such a file names for it, and fails (exit 1)
on any divergence.

On the cpu backend, allreduce can be forced across processes (ring or recursive
doubling: collbench launch -n 4 -- determinism --backend cpu). docs/determinism.md.`,
		Args: noArgs,
		Example: "  collbench launch -n 4 -- determinism --backend cpu --dtype float,half,bfloat16\n" +
			"  collbench determinism --collectives allreduce,reduce-scatter --sizes 8:1G:x4 -o det.json",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return determinismRun(o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Collectives, "collectives", "allreduce,reduce-scatter,reduce", "collectives that reduce (comma-separated)")
	fs.StringVar(&o.Sizes, "sizes", "8:1M:x4", "sizes, smallest first (an element is compared as its message grows)")
	fs.StringVar(&o.DTypes, "dtype", "float,half,bfloat16", "floating-point types (comma-separated)")
	fs.IntVar(&o.Runs, "runs", 3, "runs of every size, each on fresh communicators")
	fs.Uint64Var(&o.Seed, "seed", 1, "the random inputs' seed (written in the record, to replay a finding)")
	fs.BoolVar(&o.DefaultOnly, "default-only", false, "the library's own choice only, no forced algorithm")
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.StringVar(&o.Backend, "backend", "auto", "auto, cpu or nccl")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load")
	fs.StringVarP(&o.Output, "output", "o", "", "write every cell as JSON here, rewritten after each collective, type and choice")
	fs.StringVar(&o.TunerFile, "tuner-file", "", "write a tuner file pinning the fastest stable choice per size here at the end")
	fs.StringVar(&o.Check, "check", "", "run each size with the choice this tuner file names for it (the default where none does); any divergence fails (exit 1)")
	fs.DurationVar(&o.Budget, "budget", 0, "stop starting collectives, types and choices once this much time is spent (0: no limit); what was measured is kept")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no progress lines")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks")
	cmd.MarkFlagsMutuallyExclusive("check", "tuner-file")
	cmd.MarkFlagsMutuallyExclusive("check", "default-only")
	return cmd
}

// determinismRun parses the flags, runs the engine, and writes the matrix,
// the record and the tuner file.
func determinismRun(o *DeterminismOptions) error {
	d := engine.Determinism{Backend: o.Backend, NCCLLib: o.NCCLLib, Ranks: o.Ranks, RunFlags: o.RunFlags, Tool: Version}
	d.Runs, d.Seed, d.DefaultOnly, d.CheckFile, d.Budget = o.Runs, o.Seed, o.DefaultOnly, o.Check, o.Budget
	var err error
	if d.Collectives, err = measure.ParseCollectives(o.Collectives); err != nil {
		return &engine.UsageError{Err: err}
	}
	if d.Sizes, err = measure.ParseSizes(o.Sizes); err != nil {
		return &engine.UsageError{Err: err}
	}
	if d.DTypes, err = measure.ParseDTypes(o.DTypes); err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := d.Check(); err != nil {
		return err
	}
	ro, err := resolveRecordOutputs(o.Output, o.TunerFile)
	if err != nil {
		return err
	}
	if !o.Quiet {
		d.Progress = func(s string) { fmt.Fprintf(o.IO.ErrOut, "collbench determinism: %s\n", s) }
	}
	if rw := ro.rewriter(o.IO.ErrOut); rw != nil {
		d.OnRecord = rw
	}
	rep, runErr := o.Factory.RunDeterminism(o.Ctx, d)
	if rep == nil {
		return runErr
	}
	if err := rep.WriteText(o.IO.Out); err != nil {
		return &engine.RunError{Err: err}
	}
	if err := ro.finish(o.IO, rep.WriteJSON, rep.WriteTunerFile, "the tuner file"); err != nil {
		return err
	}
	return runErr
}
