package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/internal/outfile"
	"collbench/report"
	"collbench/results"
	"collbench/suites"
)

// readResults reads a collbench result or NCCL benchmark JSON file; every
// failure is a usage error naming the file.
func readResults(path string) (*results.Document, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, engine.UsageErrorf("cannot read %s: %v", path, errors.Unwrap(err))
	}
	defer fh.Close()
	d, err := results.ReadNamed(fh, path)
	if err != nil {
		return nil, engine.UsageErrorf("%s: %v", path, err)
	}
	return d, nil
}

// CompareOptions are the flags of `collbench compare`.
type CompareOptions struct {
	IO           *IOStreams
	Format       string
	Output       string
	AllowMissing bool
	Strict       bool
	BusBWPct     float64
	TimePct      float64
	TimeFloorUS  float64
	BandEdge     string
	Thresholds   *report.Thresholds // set by run --config
}

// NewCmdCompare builds `collbench compare BASELINE CURRENT`.
func NewCmdCompare(f *Factory) *cobra.Command {
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
			return compareRun(o, args[0], args[1])
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
	edge, err := suites.ParseSize(o.BandEdge)
	if err != nil {
		return report.Thresholds{}, fmt.Errorf("--band-edge: %v", err)
	}
	th := report.Thresholds{AllowMissing: o.AllowMissing, Strict: o.Strict, Bands: []report.Band{
		{MinSize: 0, Metric: "time", Pct: o.TimePct, FloorUS: o.TimeFloorUS},
		{MinSize: edge, Metric: "busbw", Pct: o.BusBWPct}}}
	return th, th.Validate()
}

func compareRun(o *CompareOptions, basePath, curPath string) error {
	if !contains(report.CompareFormats, o.Format) {
		return engine.UsageErrorf("unknown --format %q for compare (valid: %s)", o.Format, strings.Join(report.CompareFormats, ", "))
	}
	th, err := o.thresholds()
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := notAnInput(o.Output, basePath, curPath); err != nil {
		return err
	}
	base, err := readResults(basePath)
	if err != nil {
		return err
	}
	cur, err := readResults(curPath)
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// NewCmdBaseline builds `collbench baseline make`.
func NewCmdBaseline(f *Factory) *cobra.Command {
	cmd := &cobra.Command{Use: "baseline", Short: "Make baselines from several runs", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return engine.UsageErrorf("baseline needs a subcommand: collbench baseline make RUN... -o baseline.json")
		}}
	var out string
	mk := &cobra.Command{
		Use:     "make RUN.json... -o BASELINE.json",
		Short:   "Combine runs into a baseline: the median of each row, with its spread",
		Example: "  collbench baseline make run1.json run2.json run3.json -o baseline.json",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return engine.UsageErrorf("baseline make needs at least one run file")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := notAnInput(out, args...); err != nil {
				return err
			}
			var docs []*results.Document
			for _, p := range args {
				d, err := readResults(p)
				if err != nil {
					return err
				}
				docs = append(docs, d)
			}
			b, err := results.MakeBaseline(docs)
			if err != nil {
				return &engine.UsageError{Err: err}
			}
			if err := writeTo(f.IO.Out, "--output", out, func(w io.Writer) error { return results.Write(w, b) }); err != nil {
				return err
			}
			if out != "" {
				fmt.Fprintf(f.IO.ErrOut, "collbench: baseline of %d runs, %d rows, written to %s\n", len(docs), len(b.Results), out)
			}
			return nil
		},
	}
	mk.Flags().StringVarP(&out, "output", "o", "", "write the baseline to FILE (default stdout)")
	cmd.AddCommand(mk)
	return cmd
}

// NewCmdReport builds `collbench report RESULTS... -o report.html`.
func NewCmdReport(f *Factory) *cobra.Command {
	var out, baseline, title string
	cmd := &cobra.Command{
		Use:   "report RESULTS.json... -o report.html",
		Short: "Render one self-contained HTML report with tables and plots",
		Long: `report writes one HTML file with no scripts and no network access: each run's
header and topology, bus bandwidth and small-message time plots per collective
(with --baseline overlaid and compared), per-group bars, and the result tables.`,
		Example: "  collbench report today.json -o report.html\n  collbench report today.json --baseline baseline.json -o report.html",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return engine.UsageErrorf("report needs at least one results file")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return engine.UsageErrorf("report needs -o FILE.html")
			}
			if err := notAnInput(out, append([]string{baseline}, args...)...); err != nil {
				return err
			}
			in := report.HTMLInput{Title: title}
			for _, p := range args {
				d, err := readResults(p)
				if err != nil {
					return err
				}
				in.Runs = append(in.Runs, report.Series{Label: filepath.Base(p), Doc: d})
			}
			if baseline != "" {
				b, err := readResults(baseline)
				if err != nil {
					return err
				}
				in.Baseline = &report.Series{Label: "baseline " + filepath.Base(baseline), Doc: b}
				c, err := report.Compare(b, in.Runs[0].Doc, baseline, args[0], report.DefaultThresholds())
				if err == nil {
					in.Comparison = c
				}
			}
			if in.Title == "" {
				in.Title = "collbench report: " + strings.Join(args, ", ")
			}
			if err := writeTo(f.IO.Out, "--output", out, func(w io.Writer) error { return report.WriteHTML(w, in) }); err != nil {
				return err
			}
			sayWrote(f.IO.ErrOut, fmt.Sprintf("the HTML report of %d run(s)", len(args)), out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write")
	cmd.Flags().StringVar(&baseline, "baseline", "", "a baseline to overlay and compare with")
	cmd.Flags().StringVar(&title, "title", "", "the report's title")
	return cmd
}

// NewCmdPlot builds `collbench plot`.
func NewCmdPlot(f *Factory) *cobra.Command {
	var out, kind, coll, format string
	cmd := &cobra.Command{
		Use:     "plot RESULTS.json... -o plot.svg",
		Short:   "Draw a plot of one collective as SVG or PNG",
		Example: "  collbench plot today.json baseline.json --collective allreduce -o allreduce.svg\n  collbench plot today.json --kind time -o small.png",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return engine.UsageErrorf("plot needs at least one results file")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return engine.UsageErrorf("plot needs -o FILE.svg or FILE.png (or -o - --format svg)")
			}
			target, err := outputTarget("--output", out)
			if err != nil {
				return err
			}
			if format == "" {
				format = strings.TrimPrefix(strings.ToLower(filepath.Ext(out)), ".")
				if target.Kind == outfile.Stream && format != "png" {
					format = "svg" // a pipe, a device or standard output
				}
				if format != "svg" && format != "png" {
					return engine.UsageErrorf("plot writes SVG or PNG: name -o FILE.svg or FILE.png, or give --format svg|png")
				}
			}
			if format != "svg" && format != "png" {
				return engine.UsageErrorf("unknown --format %q for plot (valid: svg, png)", format)
			}
			if err := notAnInput(out, args...); err != nil {
				return err
			}
			if !contains(report.PlotKinds, kind) {
				return engine.UsageErrorf("unknown --kind %q (valid: %s)", kind, strings.Join(report.PlotKinds, ", "))
			}
			var series []report.Series
			for _, p := range args {
				d, err := readResults(p)
				if err != nil {
					return err
				}
				series = append(series, report.Series{Label: filepath.Base(p), Doc: d})
			}
			if coll == "" {
				if len(series[0].Doc.Results) == 0 {
					return engine.UsageErrorf("%s has no results", args[0])
				}
				coll = series[0].Doc.Results[0].Collective
			} else if c, err := suites.ParseCollective(coll); err != nil {
				return &engine.UsageError{Err: err}
			} else {
				coll = c.String()
			}
			p, err := report.Plot(kind, coll, series)
			if err != nil {
				return &engine.UsageError{Err: err}
			}
			if err := writeTarget(f.IO.Out, target, true, func(w io.Writer) error { return report.WritePlot(w, p, format) }); err != nil {
				return err
			}
			sayWrote(f.IO.ErrOut, fmt.Sprintf("the %s plot of %s (%s)", kind, coll, format), out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the .svg or .png file to write (- for standard output)")
	cmd.Flags().StringVar(&format, "format", "", "svg or png (default: by the --output name's extension, else svg)")
	cmd.Flags().StringVar(&kind, "kind", "busbw", "busbw (vs size), time (small messages) or groups (per-group bars)")
	cmd.Flags().StringVar(&coll, "collective", "", "the collective to plot (default: the first in the file)")
	return cmd
}
