package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/measure"
	"collbench/report"
	"collbench/results"
)

// readResults reads a collbench result or NCCL benchmark file
// (results.ReadPath); every failure is a usage error naming the file, and
// one a signal caused carries the signal's exit code.
func readResults(ctx context.Context, path string) (*results.Document, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	d, err := results.ReadPath(ctx, path)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, bySignal(ctx, err)
	case err != nil:
		return nil, &engine.UsageError{Err: err}
	}
	return d, nil
}

// bySignal gives err the exit code of the signal that ended ctx, if one did.
func bySignal(ctx context.Context, err error) error {
	var sc *engine.SignalCause
	if errors.As(context.Cause(ctx), &sc) {
		return fmt.Errorf("%w (%w)", err, &engine.SignalError{Sig: sc.Sig, Rows: -1})
	}
	return err
}

// CompareOptions are the flags of `collbench compare`.
type CompareOptions struct {
	IO           *IOStreams
	Ctx          context.Context
	Format       string
	Output       string
	AllowMissing bool
	Strict       bool
	BusBWPct     float64
	TimePct      float64
	TimeFloorUS  float64
	BandEdge     string
	Thresholds   *report.Thresholds // set by run --config
	// BasePath and CurPath are the files compared.
	BasePath, CurPath string
}

// NewCmdCompare builds `collbench compare BASELINE CURRENT`. runF replaces
// compareRun in tests.
func NewCmdCompare(f *Factory, runF func(*CompareOptions) error) *cobra.Command {
	o := &CompareOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "compare BASELINE CURRENT",
		Short: "Compare a run with a baseline and report regressions (exit 1 on any)",
		Long: `compare matches rows by collective, type, op, root, groups, size and mode and
judges each: below --band-edge by time (regressed when it rises more than
--time-threshold percent and --time-floor), from it by bus bandwidth (regressed
when it drops more than --busbw-threshold percent). Where either side measured
its spread (per-iteration CV, or a baseline's spread over runs), a change within
twice that spread is not a regression. Both files may be collbench results or
NCCL benchmark JSON output (-J, format version 3).

Exit codes: 0 no regression, 1 a regression or a missing row (or, with
--strict, a different machine shape or NCCL version), 2 unreadable files or
nothing in common.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return engine.UsageErrorf("compare needs two files, BASELINE and CURRENT (got %d)", len(args))
			}
			return nil
		},
		Example: "  collbench compare baseline.json today.json\n  collbench compare baseline.json today.json --format markdown > comment.md\n  collbench compare old-nccl-tests.json today.json --format junit -o junit.xml",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BasePath, o.CurPath, o.Ctx = args[0], args[1], cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return compareRun(o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Format, "format", "table", "table, markdown, junit or json")
	fs.StringVarP(&o.Output, "output", "o", "", "write the comparison to FILE instead of stdout")
	fs.BoolVar(&o.AllowMissing, "allow-missing", false, "rows of the baseline missing from the current run do not fail")
	fs.BoolVar(&o.Strict, "strict", false, "a different machine shape or NCCL version fails")
	fs.Float64Var(&o.BusBWPct, "busbw-threshold", 5, "percent busbw drop that regresses, from --band-edge up")
	fs.Float64Var(&o.TimePct, "time-threshold", 10, "percent time rise that regresses, below --band-edge")
	fs.Float64Var(&o.TimeFloorUS, "time-floor", 2, "microseconds a time must also rise by to regress")
	fs.StringVar(&o.BandEdge, "band-edge", "1M", "size where judging switches from time to bus bandwidth")
	return cmd
}

func (o *CompareOptions) thresholds() (report.Thresholds, error) {
	if o.Thresholds != nil {
		th := *o.Thresholds
		th.AllowMissing = th.AllowMissing || o.AllowMissing
		th.Strict = th.Strict || o.Strict
		return th, th.Validate()
	}
	for _, f := range []struct {
		name string
		v    float64
		zero bool
	}{{"--busbw-threshold", o.BusBWPct, false}, {"--time-threshold", o.TimePct, false}, {"--time-floor", o.TimeFloorUS, true}} {
		if f.v < 0 || (f.v == 0 && !f.zero) || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			want := "a percentage above 0, e.g. 10"
			if f.zero {
				want = "microseconds, 0 or more, e.g. 2"
			}
			return report.Thresholds{}, fmt.Errorf("invalid %s %v: must be %s", f.name, f.v, want)
		}
	}
	edge, err := measure.ParseSize(o.BandEdge)
	if err != nil {
		return report.Thresholds{}, fmt.Errorf("--band-edge: %v", err)
	}
	th := report.Thresholds{AllowMissing: o.AllowMissing, Strict: o.Strict, Bands: []report.Band{
		{MinSize: 0, Metric: "time", Pct: o.TimePct, FloorUS: o.TimeFloorUS},
		{MinSize: edge, Metric: "busbw", Pct: o.BusBWPct}}}
	return th, th.Validate()
}

func compareRun(o *CompareOptions) error {
	basePath, curPath := o.BasePath, o.CurPath
	if !slices.Contains(report.CompareFormats, o.Format) {
		return engine.UsageErrorf("unknown --format %q for compare (valid: %s)", o.Format, strings.Join(report.CompareFormats, ", "))
	}
	th, err := o.thresholds()
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := notAnInput(o.Output, basePath, curPath); err != nil {
		return err
	}
	base, err := readResults(o.Ctx, basePath)
	if err != nil {
		return err
	}
	cur, err := readResults(o.Ctx, curPath)
	if err != nil {
		return err
	}
	c, err := report.Compare(base, cur, basePath, curPath, th)
	if err != nil {
		return engine.UsageErrorf("compare %s %s: %v", basePath, curPath, err)
	}
	if err := writeTo(o.IO.Out, "--output", o.Output, func(w io.Writer) error { return report.WriteComparison(w, c, o.Format) }); err != nil {
		return err
	}
	if c.Failed {
		return &engine.CheckFailedError{Msg: "compare: " + strings.Join(c.Reasons, ", ")}
	}
	if c.Inconclusive {
		return &engine.InconclusiveError{Msg: fmt.Sprintf("compare: inconclusive: %s; record both with --stable on a quieter host, or gate on a baseline of several runs (collbench baseline make)", c.Unjudged[len(c.Unjudged)-1])}
	}
	return nil
}

// notAnInput refuses an output path that names one of the input files: the
// write would destroy what it reads.
func notAnInput(out string, inputs ...string) error {
	if out == "" {
		return nil
	}
	oi, err := os.Stat(out)
	for _, in := range inputs {
		if in == "" {
			continue
		}
		same := filepath.Clean(in) == filepath.Clean(out)
		if ii, e := os.Stat(in); !same && err == nil && e == nil {
			same = os.SameFile(oi, ii)
		}
		if same {
			return engine.UsageErrorf("-o %s is also an input: writing it would destroy what is being read; choose another output file", out)
		}
	}
	return nil
}
