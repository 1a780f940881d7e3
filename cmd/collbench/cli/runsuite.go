package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/measure"
	"collbench/report"
	"collbench/results"
)

// RunOptions are the flags of `collbench run`.
type RunOptions struct {
	IO       *IOStreams
	Factory  *Factory
	Ctx      context.Context
	Config   string
	Baseline string
	Output   string
	Quiet    bool
	Timeout  time.Duration
	// NoBaseline runs without comparing, even where the config names a baseline.
	NoBaseline bool
}

// NewCmdRun builds `collbench run --config FILE`.
func NewCmdRun(f *Factory, runF func(*RunOptions) error) *cobra.Command {
	o := &RunOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "run --config SUITE.yaml",
		Short: "Run a YAML suite: measure, write results, compare with a baseline, render the report",
		Long: `run executes every suite of a YAML config (collectives, sizes, types, ops, group
layouts, iterations), writes results.json to the output directory, compares it
with the baseline when one is configured or given (comparison.txt, comparison.md,
junit.xml), checks acceptance against the peak bandwidth when configured, and
renders report.html. Exit 1 on wrong results, a regression or a failed
acceptance; 2 on a bad config.`,
		Args:    noArgs,
		Example: "  collbench run --config configs/quick.yaml\n  collbench run --config configs/ci.yaml --baseline baseline.json --output out/",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return runSuite(o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Config, "config", "", "the YAML suite to run")
	fs.StringVar(&o.Baseline, "baseline", "", "compare with this baseline (overrides the config's)")
	fs.BoolVar(&o.NoBaseline, "no-baseline", false, "measure without comparing, although the config names a baseline (to collect runs for one)")
	fs.StringVar(&o.Output, "output", "", "directory for results (overrides the config's; default collbench-out)")
	fs.BoolVar(&o.Quiet, "quiet", false, "no tables or progress; only the verdict")
	fs.DurationVar(&o.Timeout, "timeout", engine.DefaultRunFlags().Timeout, "watchdog: stop a suite when no rank makes progress for this long (0 = off)")
	atLeast(fs, "0s", "timeout")
	cmd.MarkFlagsMutuallyExclusive("baseline", "no-baseline")
	return cmd
}

// runSuite runs a suite from YAML (run --config): every sweep in every
// layout, results.json rewritten after each row, then the report, the
// comparison with the baseline and the acceptance.
func runSuite(o *RunOptions) (err error) {
	if o.Config == "" {
		return engine.UsageErrorf("run needs --config FILE.yaml (see configs/)")
	}
	plan, err := engine.LoadSuite(o.Ctx, o.Config, benchDefaults(o.Factory).Spec)
	if err != nil {
		return err
	}
	// The output directory is relative to where run is started; the
	// baseline is relative to the config file.
	baseDoc, baseline, err := o.suiteBaseline(plan)
	if err != nil {
		return err
	}
	outDir := cmp.Or(o.Output, cmp.Or(plan.Output, "collbench-out"))
	_, statErr := os.Stat(outDir)
	if err := engine.MakeOutputDir(outDir); err != nil {
		return err
	}
	// A run refused before it wrote anything leaves nothing behind: the
	// directory it made goes again while it is empty.
	defer func() {
		var ue *engine.UsageError
		if errors.As(err, &ue) && os.IsNotExist(statErr) {
			_ = os.Remove(outDir) // fails, as it should, once it holds a file
		}
	}()

	out := o.IO.Out
	if o.Quiet {
		out = io.Discard
	}
	resultsPath := filepath.Join(outDir, "results.json")
	resultsOut, err := outputTarget("in --output", resultsPath)
	if err != nil {
		return err
	}
	// results.json holds every row measured so far, whenever the process
	// is killed: it is replaced whole after every row.
	var merged *results.Document
	var enc results.Encoder
	saved := 0
	save := func(cur *results.Document) {
		all := results.Merge(merged.Clone(), cur)
		for _, r := range all.Results[saved:] {
			_ = enc.Add(r)
		}
		saved = len(all.Results)
		if !resultsOut.Replaced() {
			return // a stream takes the whole document once, at the end
		}
		if err := resultsOut.Write(false, func(w io.Writer) error { return enc.Write(w, all) }); err != nil {
			fmt.Fprintf(o.IO.ErrOut, "collbench: cannot update it: %v\n", err)
		}
	}
	var firstErr error
	wrong := false
	for i, sw := range plan.Sweeps {
		bo := o.suiteBench(sw, out, i > 0)
		bo.onDocument = save
		bo.CollectivesFlag = strings.Join(sw.Collectives, ",")
		o.Factory.Args = bo.equivalentCommand()
		err := benchRun(bo)
		var ce *engine.CheckFailedError
		switch {
		case errors.As(err, &ce):
			wrong = true
		case err != nil:
			var ue *engine.UsageError
			if errors.As(err, &ue) {
				return engine.UsageErrorf("config %s: line %d: %v", o.Config, sw.Line, ue.Err)
			}
			firstErr = err
		}
		if bo.document != nil && len(bo.document.Results) > 0 {
			merged = results.Merge(merged, bo.document)
		}
		if firstErr != nil {
			break
		}
	}
	if merged == nil {
		if firstErr != nil {
			return firstErr
		}
		return &engine.RunError{Err: errors.New("no results were measured")}
	}
	if err := writeTarget(nil, resultsOut, true, func(w io.Writer) error { return results.Write(w, merged) }); err != nil {
		return err
	}
	var failures []string
	inconclusive := false
	if wrong || merged.Summary.WrongTotal > 0 {
		failures = append(failures, fmt.Sprintf("%d wrong elements", merged.Summary.WrongTotal))
	}
	html := report.HTMLInput{Title: "collbench " + plan.Name, Runs: []report.Series{{Label: "current", Doc: merged, Path: resultsPath}}}
	if baseDoc != nil {
		html.Baseline = &report.Series{Label: "baseline", Doc: baseDoc, Path: baseline}
		c, err := report.Compare(baseDoc, merged, baseline, resultsPath, plan.Thresholds)
		if err != nil {
			return engine.UsageErrorf("comparing with %s: %v", baseline, err)
		}
		html.Comparison = c
		for name, format := range map[string]string{"comparison.txt": "table", "comparison.md": "markdown", "junit.xml": "junit", "comparison.json": "json"} {
			p := filepath.Join(outDir, name)
			if err := writeTo(nil, "in --output", p, func(w io.Writer) error { return report.WriteComparison(w, c, format) }); err != nil {
				return err
			}
		}
		if err := report.WriteComparison(o.IO.Out, c, "table"); err != nil {
			return &engine.RunError{Err: err}
		}
		if c.Failed {
			failures = append(failures, "compare: "+strings.Join(c.Reasons, ", "))
		}
		inconclusive = c.Inconclusive
	}
	if a := plan.Acceptance; a != nil {
		failures = append(failures, report.Acceptance(o.IO.Out, merged, a.MinSize, a.PeakFraction)...)
	}
	if err := writeTo(nil, "in --output", filepath.Join(outDir, "report.html"), func(w io.Writer) error { return report.WriteHTML(w, html) }); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.ErrOut, "collbench: results in %s (results.json, report.html%s)\n", outDir, map[bool]string{true: ", comparison.*, junit.xml"}[baseDoc != nil])
	switch {
	case firstErr != nil:
		return firstErr
	case len(failures) > 0:
		return &engine.CheckFailedError{Msg: "run: " + strings.Join(failures, "; ")}
	case inconclusive:
		return &engine.InconclusiveError{Msg: "run: the comparison with the baseline is inconclusive (see comparison.txt): the runs' own spread hides a change of the size asked for"}
	}
	return nil
}

// equivalentCommand is the sweep command line that runs what o runs, so a
// suite of run can be re-run on its own.
// suiteBaseline reads the baseline a run compares with: --baseline, or
// the config's (refused before measuring when it does not exist), or none
// with --no-baseline.
func (o *RunOptions) suiteBaseline(plan *engine.SuitePlan) (*results.Document, string, error) {
	baseline := o.Baseline
	if o.NoBaseline && baseline != "" {
		return nil, "", engine.UsageErrorf("--baseline and --no-baseline together: choose one")
	}
	if baseline == "" && plan.Baseline != "" && !o.NoBaseline {
		// A gate without its baseline could never fail: refuse before
		// measuring, and say how to make one.
		baseline = plan.Baseline
		if _, err := os.Stat(baseline); err != nil {
			return nil, "", engine.UsageErrorf("baseline %s (named by %s) not found: make it on this machine from a few runs "+
				"(collbench run --config %s --no-baseline --output runN, three times, then collbench baseline make run1/results.json run2/results.json run3/results.json -o %s), "+
				"or run with --no-baseline", baseline, o.Config, o.Config, baseline)
		}
	}
	if baseline == "" {
		return nil, "", nil
	}
	d, err := readResults(o.Ctx, baseline)
	return d, baseline, err
}

// suiteBench is one sweep of a suite (in one layout) as benchmark
// options: the suite's settings over the flags' own defaults, so the two
// ways of running a sweep cannot drift apart; later says it is not the
// run's first.
func (o *RunOptions) suiteBench(sw engine.SuiteSweep, out io.Writer, later bool) *BenchOptions {
	bo := benchDefaults(o.Factory)
	bo.IO = &IOStreams{In: o.IO.In, Out: out, ErrOut: o.IO.ErrOut, ErrTTY: o.IO.ErrTTY && !o.Quiet}
	bo.Ctx, bo.Quiet, bo.hideNotice, bo.Timeout = o.Ctx, o.Quiet, later, o.Timeout
	bo.Backend, bo.Ranks, bo.RankList = cmp.Or(sw.Backend, bo.Backend), sw.Ranks, sw.Layout
	bo.Spec = sw.Spec
	return bo
}

func (o *BenchOptions) equivalentCommand() []string {
	args := []string{"collbench", "sweep", "--collectives", o.CollectivesFlag}
	if o.Sizes != "" {
		args = append(args, "--sizes", o.Sizes)
	}
	// --op and --root only where a collective of the sweep takes them
	// (the sweep refuses them otherwise).
	cs, err := measure.ParseCollectives(o.CollectivesFlag)
	args = append(args, "--dtype", o.DType)
	if err != nil || slices.ContainsFunc(cs, measure.Collective.Reduces) {
		args = append(args, "--op", o.Op)
	}
	if err != nil || slices.ContainsFunc(cs, measure.Collective.Rooted) {
		args = append(args, "--root", o.Root)
	}
	args = append(args, "--mode", o.Mode,
		"-n", strconv.Itoa(o.Iters), "-w", strconv.Itoa(o.Warmup), "--check", strconv.Itoa(o.Check), "--backend", o.Backend)
	if o.Ranks > 0 {
		args = append(args, "-g", strconv.Itoa(o.Ranks))
	}
	if o.RankList != "" {
		args = append(args, "--rank-list", o.RankList)
	}
	if o.IterStats {
		args = append(args, "--iter-stats")
	}
	if o.Stable {
		args = append(args, "--stable")
	}
	if o.Cycles > 1 {
		args = append(args, "--cycles", strconv.Itoa(o.Cycles))
	}
	if o.Bitwise > 0 {
		args = append(args, "--bitwise", strconv.Itoa(o.Bitwise))
	}
	return args
}
