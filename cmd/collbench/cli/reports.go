package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/internal/outfile"
	"collbench/report"
	"collbench/results"
	"collbench/suites"
)

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
			if !slices.Contains(report.PlotKinds, kind) {
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
