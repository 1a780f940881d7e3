package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/measure"
)

// TuneOptions are the flags of `collbench tune`.
type TuneOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	Collectives string
	Sizes       string
	DType, Op   string
	Iters       int
	Warmup      int
	Ranks       int
	Backend     string
	NCCLLib     string
	Budget      time.Duration
	Repeats     int
	Check       string
	From        string // a watch record: tune what the job issued
	Output      string // the JSON document, rewritten after every result
	TunerFile   string // the tuner file (CSV), written at the end
	Quiet       bool
	engine.RunFlags
}

// NewCmdTune builds `collbench tune`.
func NewCmdTune(f *Factory, runF func(*TuneOptions) error) *cobra.Command {
	o := &TuneOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "tune",
		Short: "Find the fastest algorithm per collective and size on this machine, and prove it beats the default",
		Long: `tune measures, for each collective and size, the library's own choice and every
algorithm it can be forced to run with inside one start, each result verified; it
prints a table per collective (the default, the best, their times with their noise,
the gain), and can write every cell as JSON (-o, rewritten after every result) and a
tuner file (--tuner-file) in the format of NCCL's example tuner plugin: the best
choice where it beats the default beyond the noise of both cells, confirmed in pairs.

On NCCL (2.26 and later) the choices are forced through collbench's own tuner plugin,
carried in the binary: ring, tree and PAT with LL, LL128 and Simple, as NCCL accepts
them; NCCL's profiler records what each cell ran. On the cpu backend, allreduce across
processes (ring or recursive doubling).

The search is budgeted (--budget): every candidate once, then the leaders again
(--repeats), then each gain in pairs with the default, while time is left. Ctrl-C
keeps what was measured.

--check FILE measures a tuner file's choices against the defaults, size by size, in
pairs, and fails (exit 1) where the file's choice is slower (docs/tune.md).`,
		Args: noArgs,
		Example: "  collbench tune --backend nccl --collectives allreduce,allgather --tuner-file tuner.csv -o tune.json\n" +
			"  collbench launch -n 4 -- tune --backend cpu --tuner-file cpu-tuner.csv -o tune.json\n" +
			"  collbench launch -n 4 -- tune --backend cpu --check cpu-tuner.csv",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return tuneRun(o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Collectives, "collectives", "allreduce", "collectives to tune (comma-separated, or all)")
	fs.StringVar(&o.Sizes, "sizes", "8:256M:x4", "sizes to tune at")
	fs.StringVar(&o.DType, "dtype", "float", "element type")
	fs.StringVar(&o.Op, "op", "sum", "reduction op")
	fs.IntVarP(&o.Iters, "iters", "n", 20, "timed iterations of each measurement")
	fs.IntVarP(&o.Warmup, "warmup", "w", 5, "untimed iterations before each measurement")
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.StringVar(&o.Backend, "backend", "auto", "auto, cpu or nccl")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load")
	fs.DurationVar(&o.Budget, "budget", engine.DefaultTuneBudget, "time limit of the search (or of --check)")
	fs.IntVar(&o.Repeats, "repeats", 5, "how often the leaders are measured again")
	fs.StringVar(&o.Check, "check", "", "measure this tuner file's choices against the defaults instead of searching")
	fs.StringVar(&o.From, "from", "", "tune the collectives, sizes and type a job issued, from collbench watch's record (-o)")
	fs.StringVarP(&o.Output, "output", "o", "", "write every cell as JSON here, rewritten after every result")
	fs.StringVar(&o.TunerFile, "tuner-file", "", "write the tuner file (NCCL's example plugin's CSV) here at the end")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no progress lines")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks", "iters", "repeats")
	atLeast(fs, "0", "warmup")
	cmd.MarkFlagsMutuallyExclusive("check", "tuner-file")
	for _, f := range []string{"collectives", "sizes", "dtype"} {
		cmd.MarkFlagsMutuallyExclusive("from", f)
	}
	return cmd
}

// tuneRun runs collbench tune through the engine: tune's flags over the
// benchmarks' defaults, the -o record rewritten as each report comes, then
// the table, and the record and the tuner file where asked.
func tuneRun(o *TuneOptions) error {
	// The benchmarks' own defaults under tune's few flags.
	sp := benchDefaults(o.Factory).Spec
	sp.Sizes, sp.DType, sp.Op, sp.Iters, sp.Warmup, sp.Check, sp.Mode = o.Sizes, o.DType, o.Op, o.Iters, o.Warmup, 1, "out-of-place"
	var err error
	if sp.Collectives, err = measure.ParseCollectives(o.Collectives); err != nil {
		return &engine.UsageError{Err: err}
	}
	wantRanks := 0
	if o.From != "" {
		tf, err := engine.ReadTuneFrom(o.Ctx, o.From)
		if err != nil {
			return err
		}
		sizes := make([]string, len(tf.Sizes))
		for i, b := range tf.Sizes {
			sizes[i] = strconv.FormatInt(b, 10)
		}
		sp.Collectives, sp.Sizes, sp.DType, wantRanks = tf.Collectives, strings.Join(sizes, ","), tf.DType, tf.Ranks
		for _, n := range tf.Notes {
			fmt.Fprintf(o.IO.ErrOut, "collbench tune: %s\n", n)
		}
	}
	plan, err := sp.Plan()
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	ro, err := resolveRecordOutputs(o.Output, o.TunerFile)
	if err != nil {
		return err
	}
	t := engine.Tune{Plan: plan, Backend: o.Backend, NCCLLib: o.NCCLLib, Ranks: o.Ranks, Budget: o.Budget, Repeats: o.Repeats,
		Check: o.Check, WantRanks: wantRanks, RunFlags: o.RunFlags, Tool: Version}
	t.OnReady = func(choice engine.BackendChoice, rank0 bool) error {
		if choice.Auto && rank0 && !o.Quiet {
			fmt.Fprintf(o.IO.ErrOut, "collbench: backend %s (%s)\n", choice.Backend.Name(), choice.Reason)
		}
		return nil
	}
	if !o.Quiet {
		t.Progress = func(s string) { fmt.Fprintf(o.IO.ErrOut, "collbench tune: %s\n", s) }
	}
	if rw := ro.rewriter(o.IO.ErrOut); rw != nil {
		t.OnRecord = rw
	}
	rep, runErr := o.Factory.RunTune(o.Ctx, t)
	if rep == nil {
		return runErr
	}
	if err := rep.WriteTable(o.IO.Out); err != nil {
		return &engine.RunError{Err: err}
	}
	if env := rep.Environment(); env != "" {
		fmt.Fprintf(o.IO.Out, "# one setting fits every size measured: %s\n", env)
	}
	n := len(rep.Entries())
	if err := ro.finish(o.IO, rep.WriteJSON, func(w io.Writer) error { return rep.WriteTunerFile(w) },
		fmt.Sprintf("the tuner file (%d %s)", n, map[bool]string{true: "line", false: "lines"}[n == 1])); err != nil {
		return err
	}
	if ro.tuner != nil && ro.tuner.Replaced() && rep.Backend == "nccl" && !o.Quiet {
		path, err := filepath.Abs(ro.tunerPath)
		if err != nil {
			path = ro.tunerPath
		}
		fmt.Fprintf(o.IO.ErrOut, "collbench tune: a job applies it with NCCL_TUNER_PLUGIN=$(collbench watch --plugin-path) COLLBENCH_TUNER_FILE=%s (docs/tune.md)\n", path)
	}
	return runErr
}
