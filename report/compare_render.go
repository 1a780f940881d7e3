package report

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"

	"collbench/internal/words"
)

// CompareFormats are the output formats of a comparison.
var CompareFormats = []string{"table", "markdown", "junit", "json"}

// WriteComparison renders c as table, markdown, junit or json.
func WriteComparison(w io.Writer, c *Comparison, format string) error {
	switch format {
	case "table":
		return compareTable(w, c)
	case "markdown", "md":
		return compareMarkdown(w, c)
	case "junit":
		return compareJUnit(w, c)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	return fmt.Errorf("unknown compare format %q (valid: %s)", format, strings.Join(CompareFormats, ", "))
}

func (c *Comparison) verdictLine() string {
	var parts []string
	for _, v := range []Verdict{Regressed, Missing, Inconclusive, Improved, New, OK} {
		if n := c.Counts[v]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, v))
		}
	}
	status := "PASS"
	switch {
	case c.Failed:
		status = "FAIL (" + strings.Join(c.Reasons, ", ") + ")"
	case c.Inconclusive && c.CatchablePct > 0:
		status = fmt.Sprintf("INCONCLUSIVE (the runs' own spread hides changes below %s%%: %d part(s) could not be judged)", trimPct(c.CatchablePct), len(c.Unjudged))
	case c.Inconclusive:
		status = fmt.Sprintf("INCONCLUSIVE (%d part(s) could not be judged)", len(c.Unjudged))
	}
	return fmt.Sprintf("%s: %s of %d compared", status, strings.Join(parts, ", "), len(c.Rows))
}

func valueString(v float64, m string) string {
	if m == "busbw" {
		return fmt.Sprintf("%.2f GB/s", v)
	}
	return FormatTime(v) + " us"
}

func (r CompareRow) cells() []string {
	root := "-"
	if r.Root >= 0 {
		root = fmt.Sprint(r.Root)
	}
	b, k, d := valueString(r.Baseline, r.Metric), valueString(r.Current, r.Metric), fmt.Sprintf("%+.1f%%", r.DeltaPct)
	switch r.Verdict {
	case Missing:
		k, d = "-", "-"
	case New:
		b, d = "-", "-"
	}
	allowed := "-"
	if r.AllowedPct > 0 {
		allowed = fmt.Sprintf("%.1f%%", r.AllowedPct)
	}
	return []string{r.Collective, r.DType, r.Op, root, shortLayout(r.Layout), words.Bytes(r.SizeBytes), r.Mode, r.Metric, b, k, d, allowed, string(r.Verdict)}
}

var compareHeader = []string{"collective", "type", "op", "root", "groups", "size", "mode", "metric", "baseline", "current", "delta", "allowed", "verdict"}

func compareTable(w io.Writer, c *Comparison) error {
	fmt.Fprintf(w, "# baseline: %s (%s%s)\n", c.Baseline.Label, c.Baseline.Tool, runsNote(c.Baseline))
	fmt.Fprintf(w, "# current:  %s (%s)\n", c.Current.Label, c.Current.Tool)
	for _, s := range c.Warnings {
		fmt.Fprintf(w, "# WARNING:  %s\n", s)
	}
	tb := PlainTable(w)
	h := make([]any, len(compareHeader))
	for i, s := range compareHeader {
		h[i] = s
	}
	tb.Header(h...)
	for _, r := range c.Rows {
		cells := r.cells()
		row := make([]any, len(cells))
		for i, s := range cells {
			row[i] = s
		}
		if err := tb.Append(row...); err != nil {
			return err
		}
	}
	if err := tb.Render(); err != nil {
		return err
	}
	for _, n := range c.AlgorithmNotes {
		fmt.Fprintf(w, "# why:      %s\n", n)
	}
	for _, s := range c.Shifts {
		fmt.Fprintf(w, "# as a whole: %s\n", s.line())
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "# note:     %s\n", n)
	}
	for _, n := range c.Unjudged {
		fmt.Fprintf(w, "# unjudged: %s\n", n)
	}
	fmt.Fprintf(w, "# %s\n", c.verdictLine())
	return nil
}

func runsNote(r RunInfo) string {
	if r.Runs > 1 {
		return fmt.Sprintf(", median of %d runs", r.Runs)
	}
	return ""
}

func mdRow(cells []string) string { return "| " + strings.Join(cells, " | ") + " |" }

func compareMarkdown(w io.Writer, c *Comparison) error {
	fmt.Fprintf(w, "### collbench: %s\n\n", c.verdictLine())
	fmt.Fprintf(w, "Baseline `%s` (%s%s), current `%s` (%s).\n\n", c.Baseline.Label, c.Baseline.Tool, runsNote(c.Baseline), c.Current.Label, c.Current.Tool)
	for _, s := range c.Warnings {
		fmt.Fprintf(w, "> **Warning:** %s\n\n", s)
	}
	for _, s := range c.Notes {
		fmt.Fprintf(w, "> **Note:** %s\n\n", s)
	}
	for _, s := range c.Unjudged {
		fmt.Fprintf(w, "> **Could not judge:** %s\n\n", s)
	}
	var bad, rest []CompareRow
	for _, r := range c.Rows {
		if r.Verdict == Regressed || r.Verdict == Missing {
			bad = append(bad, r)
		} else {
			rest = append(rest, r)
		}
	}
	sep := make([]string, len(compareHeader))
	for i := range sep {
		sep[i] = "---"
	}
	table := func(rows []CompareRow) {
		fmt.Fprintln(w, mdRow(compareHeader))
		fmt.Fprintln(w, mdRow(sep))
		for _, r := range rows {
			fmt.Fprintln(w, mdRow(r.cells()))
		}
	}
	if len(bad) > 0 {
		fmt.Fprintln(w, "#### Regressed or missing")
		fmt.Fprintln(w)
		table(bad)
		fmt.Fprintln(w)
	}
	if len(c.AlgorithmNotes) > 0 {
		fmt.Fprintln(w, "#### Algorithm in the regressed bands")
		fmt.Fprintln(w)
		for _, n := range c.AlgorithmNotes {
			fmt.Fprintln(w, "- "+n)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "<details><summary>%d other rows</summary>\n\n", len(rest))
	table(rest)
	fmt.Fprintln(w, "\n</details>")
	return nil
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	Output    string        `xml:"system-out,omitempty"`
}

// junitSkipped marks a case the runs could not judge (inconclusive).
type junitSkipped struct {
	Message string `xml:"message,attr"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// compareJUnit writes one test case per collective and size band; a case
// fails when any of its rows regressed or went missing (unless allowed).
func compareJUnit(w io.Writer, c *Comparison) error {
	type key struct{ coll, band string }
	groups := map[key][]CompareRow{}
	var keys []key
	for _, r := range c.Rows {
		k := key{r.Collective, r.Band}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	sort.SliceStable(keys, func(a, b int) bool { return keys[a].coll < keys[b].coll })
	suite := junitSuite{Name: "collbench compare " + c.Current.Label + " vs " + c.Baseline.Label}
	for _, k := range keys {
		tc := junitCase{Name: fmt.Sprintf("%s %s", k.coll, k.band), ClassName: "collbench." + k.coll}
		var fails, lines []string
		unjudged := 0
		for _, r := range groups[k] {
			line := fmt.Sprintf("%s %s %s root %d %s %s %s: %s -> %s (%+.1f%%, allowed %.1f%%) %s", r.Collective, r.DType, r.Op, r.Root,
				words.Bytes(r.SizeBytes), r.Mode, r.Metric, valueString(r.Baseline, r.Metric), valueString(r.Current, r.Metric), r.DeltaPct, r.AllowedPct, r.Verdict)
			if r.BaselineAlgorithm != "" || r.CurrentAlgorithm != "" {
				line += fmt.Sprintf(" [algorithm %s -> %s]", orDash(r.BaselineAlgorithm), orDash(r.CurrentAlgorithm))
			}
			lines = append(lines, line)
			if r.Verdict == Regressed || (r.Verdict == Missing && !c.Thresholds.AllowMissing) {
				fails = append(fails, line)
			}
			if r.Verdict == Inconclusive {
				unjudged++
			}
		}
		tc.Output = strings.Join(lines, "\n")
		if len(fails) > 0 {
			tc.Failure = &junitFailure{Message: fmt.Sprintf("%d of %d rows regressed or missing", len(fails), len(groups[k])),
				Type: "regression", Text: strings.Join(fails, "\n")}
			suite.Failures++
		} else if unjudged > 0 {
			tc.Skipped = &junitSkipped{Message: fmt.Sprintf("%d of %d rows inconclusive: a change beyond the threshold within the runs' own spread", unjudged, len(groups[k]))}
		}
		suite.Cases = append(suite.Cases, tc)
	}
	suite.Tests = len(suite.Cases)
	doc := junitSuites{Name: "collbench", Tests: suite.Tests, Failures: suite.Failures, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// line says how a band fared as a whole.
func (s Shift) line() string {
	verdict := "ok"
	switch {
	case s.Regressed:
		verdict = "REGRESSED"
	case s.Inconclusive:
		verdict = fmt.Sprintf("INCONCLUSIVE (%s%% asked)", trimPct(s.AskedPct))
	}
	return fmt.Sprintf("%s, %s (%s): median %+.1f%% over %d rows, allowed -%.1f%%: %s", s.Case, s.Band, s.Metric, s.MedianPct, s.Rows, s.AllowedPct, verdict)
}
