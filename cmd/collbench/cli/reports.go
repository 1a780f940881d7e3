package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"collbench/doctor"
	"collbench/engine"
	"collbench/measure"
	"collbench/report"
	"collbench/results"
)

// BaselineOptions are the arguments of `collbench baseline make`.
type BaselineOptions struct {
	IO     *IOStreams
	Ctx    context.Context
	Runs   []string // the run files
	Output string
}

// NewCmdBaseline builds `collbench baseline make`. runF replaces baselineRun
// in tests.
func NewCmdBaseline(f *Factory, runF func(*BaselineOptions) error) *cobra.Command {
	o := &BaselineOptions{IO: f.IO}
	cmd := &cobra.Command{Use: "baseline", Short: "Make baselines from several runs", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return engine.UsageErrorf("baseline needs a subcommand: collbench baseline make RUN... -o baseline.json")
		}}
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
			o.Runs, o.Ctx = args, cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return baselineRun(o)
		},
	}
	mk.Flags().StringVarP(&o.Output, "output", "o", "", "write the baseline to FILE (default stdout)")
	cmd.AddCommand(mk)
	return cmd
}

// ReportOptions are the arguments of `collbench report`.
type ReportOptions struct {
	IO                      *IOStreams
	Ctx                     context.Context
	Runs                    []string
	Output, Baseline, Title string
	// History and Node plot one node's doctor history instead of runs.
	History, Node string
}

// NewCmdReport builds `collbench report RESULTS... -o report.html`. runF
// replaces reportRun in tests.
func NewCmdReport(f *Factory, runF func(*ReportOptions) error) *cobra.Command {
	o := &ReportOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "report RESULTS.json... -o report.html",
		Short: "Render one self-contained HTML report with tables and plots",
		Long: `report writes one HTML file with no scripts and no network access: each run's
header and topology, bus bandwidth and small-message time plots per collective
(with --baseline overlaid and compared), per-group bars, and the result tables.`,
		Example: "  collbench report today.json -o report.html\n  collbench report today.json --baseline baseline.json -o report.html\n  collbench report --history /var/lib/collbench/history --node node-17 -o node-17.html",
		Args: func(cmd *cobra.Command, args []string) error {
			if h, _ := cmd.Flags().GetString("history"); h != "" {
				if len(args) > 0 {
					return engine.UsageErrorf("report --history plots a node's doctor history: give no results files with it")
				}
				return nil
			}
			if len(args) == 0 {
				return engine.UsageErrorf("report needs at least one results file (or --history DIR)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Runs, o.Ctx = args, cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return reportRun(o)
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "the HTML file to write")
	cmd.Flags().StringVar(&o.Baseline, "baseline", "", "a baseline to overlay and compare with")
	cmd.Flags().StringVar(&o.Title, "title", "", "the report's title")
	cmd.Flags().StringVar(&o.History, "history", "", "plot a node's doctor history kept in DIR (doctor --history DIR) instead of results files")
	cmd.Flags().StringVar(&o.Node, "node", "", "with --history: the host to plot (default: the only one kept)")
	return cmd
}

// historyReportRun writes one node's doctor history as a page.
func historyReportRun(o *ReportOptions) error {
	node := o.Node
	if node == "" {
		hosts, err := doctor.HistoryHosts(o.History)
		if err != nil {
			return &engine.UsageError{Err: err}
		}
		switch len(hosts) {
		case 0:
			return engine.UsageErrorf("--history %s keeps no node yet: run collbench doctor --history %s first", o.History, o.History)
		case 1:
			node = hosts[0]
		default:
			if len(hosts) > 8 {
				hosts = append(hosts[:8], "...")
			}
			return engine.UsageErrorf("--history %s keeps several nodes: name one with --node (%s)", o.History, strings.Join(hosts, ", "))
		}
	}
	h, err := doctor.LoadNodeHistory(o.History, node)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := writeTo(o.IO.Out, "--output", o.Output, h.WriteHTML); err != nil {
		return err
	}
	sayWrote(o.IO.ErrOut, fmt.Sprintf("the history of node %s (%d run(s))", node, len(h.Records)), o.Output)
	return nil
}

// PlotOptions are the arguments of `collbench plot`.
type PlotOptions struct {
	IO                               *IOStreams
	Ctx                              context.Context
	Runs                             []string
	Output, Kind, Collective, Format string
}

// NewCmdPlot builds `collbench plot`. runF replaces plotRun in tests.
func NewCmdPlot(f *Factory, runF func(*PlotOptions) error) *cobra.Command {
	o := &PlotOptions{IO: f.IO}
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
			o.Runs, o.Ctx = args, cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return plotRun(o)
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "the .svg or .png file to write (- for standard output)")
	cmd.Flags().StringVar(&o.Format, "format", "", "svg or png (default: by the --output name's extension, else svg)")
	cmd.Flags().StringVar(&o.Kind, "kind", "busbw", "busbw (vs size), time (small messages) or groups (per-group bars)")
	cmd.Flags().StringVar(&o.Collective, "collective", "", "the collective to plot (default: the first in the file)")
	return cmd
}

func baselineRun(o *BaselineOptions) error {
	if err := notAnInput(o.Output, o.Runs...); err != nil {
		return err
	}
	var docs []*results.Document
	for _, p := range o.Runs {
		d, err := readResults(o.Ctx, p)
		if err != nil {
			return err
		}
		if w := d.UnreadWords(); w != "" {
			fmt.Fprintf(o.IO.ErrOut, "collbench: warning: %s: %s\n", p, w)
		}
		docs = append(docs, d)
	}
	b, err := results.MakeBaseline(docs)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := writeTo(o.IO.Out, "--output", o.Output, func(w io.Writer) error { return results.Write(w, b) }); err != nil {
		return err
	}
	if o.Output != "" {
		fmt.Fprintf(o.IO.ErrOut, "collbench: baseline of %d runs, %d rows, written to %s\n", len(docs), len(b.Results), o.Output)
	}
	return nil
}

// reportRun writes one HTML page of one or more runs (or a doctor
// report, or a node's history), with a baseline's comparison when given.
func reportRun(o *ReportOptions) error {
	if o.Output == "" {
		return engine.UsageErrorf("report needs -o FILE.html")
	}
	if o.History != "" {
		return historyReportRun(o)
	}
	if o.Node != "" {
		return engine.UsageErrorf("--node names a host of --history DIR; give --history too")
	}
	if err := notAnInput(o.Output, append([]string{o.Baseline}, o.Runs...)...); err != nil {
		return err
	}
	switch ext := strings.ToLower(filepath.Ext(o.Output)); ext {
	case ".pdf", ".png", ".svg", ".jpg", ".jpeg", ".json", ".csv", ".md", ".txt", ".xml", ".yaml":
		// HTML written into a file named for another format opens as a
		// broken file (report -o r.pdf wrote HTML into it).
		return engine.UsageErrorf("-o %s: report writes an HTML page, not %s: name the file .html (plot draws SVG or PNG)", o.Output, strings.TrimPrefix(ext, "."))
	}
	if rep, path, err := doctorInput(o.Ctx, o.Runs); err != nil || rep != nil {
		if err != nil {
			return err
		}
		if len(o.Runs) > 1 || o.Baseline != "" {
			return engine.UsageErrorf("%s is a doctor report: give it alone, with no baseline (collbench report %s -o doctor.html)", path, path)
		}
		if err := writeTo(o.IO.Out, "--output", o.Output, func(w io.Writer) error { return doctor.WriteHTML(rep, w) }); err != nil {
			return err
		}
		sayWrote(o.IO.ErrOut, "the doctor's page", o.Output)
		return nil
	}
	in := report.HTMLInput{Title: o.Title}
	labels := shortLabels(append(slices.Clone(o.Runs), o.Baseline))
	for i, p := range o.Runs {
		d, err := readResults(o.Ctx, p)
		if err != nil {
			return err
		}
		if len(d.Results) == 0 {
			return engine.UsageErrorf("%s has no result rows: nothing to report (a run stopped before its first row writes none); give a results file with rows", p)
		}
		if w := d.UnreadWords(); w != "" {
			fmt.Fprintf(o.IO.ErrOut, "collbench: warning: %s: %s\n", p, w)
		}
		for _, prev := range in.Runs {
			if results.SameRun(prev.Doc, d) {
				fmt.Fprintf(o.IO.ErrOut, "collbench: warning: %s and %s are the same run: the page shows it twice\n", prev.Path, p)
			}
		}
		in.Runs = append(in.Runs, report.Series{Label: labels[i], Doc: d, Path: p})
	}
	if o.Baseline != "" {
		b, err := readResults(o.Ctx, o.Baseline)
		if err != nil {
			return err
		}
		if len(b.Results) == 0 {
			return engine.UsageErrorf("baseline %s has no result rows: give a baseline with rows", o.Baseline)
		}
		label := labels[len(labels)-1]
		in.Baseline = &report.Series{Label: "baseline " + label, Doc: b, Path: o.Baseline}
		c, err := report.Compare(b, in.Runs[0].Doc, label, in.Runs[0].Label, report.DefaultThresholds())
		if err != nil {
			return engine.UsageErrorf("baseline %s and %s: %v", o.Baseline, o.Runs[0], err)
		}
		in.Comparison = c
	}
	if in.Title == "" {
		in.Title = "collbench report: " + strings.Join(labels[:len(o.Runs)], ", ")
		if o.Baseline != "" {
			in.Title += " against " + labels[len(labels)-1]
		}
	}
	if err := writeTo(o.IO.Out, "--output", o.Output, func(w io.Writer) error { return report.WriteHTML(w, in) }); err != nil {
		return err
	}
	sayWrote(o.IO.ErrOut, fmt.Sprintf("the HTML report of %d run(s)", len(o.Runs)), o.Output)
	return nil
}

// plotRun draws one collective of the results files as an SVG or PNG:
// busbw or time against size, or per-group bars.
func plotRun(o *PlotOptions) error {
	out, kind, coll, format, args := o.Output, o.Kind, o.Collective, o.Format, o.Runs
	if out == "" {
		return engine.UsageErrorf("plot needs -o FILE.svg or FILE.png (or -o - --format svg)")
	}
	target, err := outputTarget("--output", out)
	if err != nil {
		return err
	}
	if format == "" {
		format = strings.TrimPrefix(strings.ToLower(filepath.Ext(out)), ".")
		if !target.Replaced() && format != "png" {
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
		d, err := readResults(o.Ctx, p)
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
	} else if c, err := measure.ParseCollective(coll); err != nil {
		return &engine.UsageError{Err: err}
	} else {
		coll = c.String()
	}
	p, err := report.Plot(kind, coll, series)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if err := writeTarget(o.IO.Out, target, true, func(w io.Writer) error { return report.WritePlot(w, p, format) }); err != nil {
		return err
	}
	sayWrote(o.IO.ErrOut, fmt.Sprintf("the %s plot of %s (%s)", kind, coll, format), out)
	return nil
}

// doctorInput reads the one input that is a doctor JSON report, if any
// (doctor.ReadReportFile).
func doctorInput(ctx context.Context, paths []string) (*doctor.Report, string, error) {
	for _, p := range paths {
		r, err := doctor.ReadReportFile(ctx, p)
		if err != nil {
			return nil, p, &engine.UsageError{Err: err}
		}
		if r != nil {
			return r, p, nil
		}
	}
	return nil, "", nil
}

// shortLabels names each file by its base name, with as many parent
// folders as it takes to tell files of one base name apart; "" stays "".
func shortLabels(paths []string) []string {
	out := make([]string, len(paths))
	for depth := 1; depth < 8; depth++ {
		seen := map[string]int{}
		for i, p := range paths {
			if p == "" {
				continue
			}
			parts := strings.Split(filepath.ToSlash(filepath.Clean(p)), "/")
			out[i] = strings.Join(parts[max(0, len(parts)-depth):], "/")
			seen[out[i]]++
		}
		clash := false
		for i, p := range paths {
			if p != "" && seen[out[i]] > 1 && filepath.Clean(p) != out[i] {
				clash = true
			}
		}
		if !clash {
			break
		}
	}
	return out
}
