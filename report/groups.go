package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"collbench/internal/words"
	"collbench/results"
)

// verify-groups' text limits: one row per rank up to maxRankRows ranks, and
// at most maxFailLines mismatch lines; the JSON keeps every one.
const (
	maxRankRows  = 16
	maxFailLines = 10
)

// rankRollup words a large layout's ranks: how many groups of which sizes
// on how many hosts, how many ranks' allreduce came out right, and a row
// for each rank that did not (the first maxFailLines of them).
func rankRollup(w io.Writer, l results.LayoutVerify) error {
	hosts := map[string]bool{}
	for _, c := range l.Communicators {
		hosts[c.Host] = true
	}
	var bad []results.BeforeAfter
	for _, x := range l.AllReduce {
		if x.After != x.Want {
			bad = append(bad, x)
		}
	}
	fmt.Fprintf(w, "# %s ranks on %s host(s) in %s groups; allreduce of r+1: %s of %s ranks got the expected sum",
		words.Count(len(l.Communicators)), words.Count(len(hosts)), words.Count(len(l.Groups)), words.Count(len(l.AllReduce)-len(bad)), words.Count(len(l.AllReduce)))
	if len(bad) == 0 {
		fmt.Fprintln(w, " (one row per rank: the JSON, -o)")
		return nil
	}
	fmt.Fprintf(w, "; the %s that did not:\n", words.Count(len(bad)))
	comm := map[int]results.CommInfo{}
	for _, c := range l.Communicators {
		comm[c.WorldRank] = c
	}
	tb := PlainTable(w)
	tb.Header("world rank", "host", "group", "rank/size", "local rank/size", "before", "allreduce after", "expected")
	for _, x := range bad[:min(len(bad), maxFailLines)] {
		c := comm[x.WorldRank]
		if err := tb.Append(fmt.Sprint(x.WorldRank), c.Host, fmt.Sprintf("%d/%d", c.GroupID, c.GroupSize), fmt.Sprintf("%d/%d", c.Rank, c.Size),
			fmt.Sprintf("%d/%d", c.LocalRank, c.LocalSize), num(x.Before), num(x.After), num(x.Want)); err != nil {
			return err
		}
	}
	return tb.Render()
}

// PlainTable returns a borderless, right-aligned ASCII table.
func PlainTable(w io.Writer) *tablewriter.Table {
	return tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleASCII),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenRows: tw.Off, BetweenColumns: tw.On},
				Lines:      tw.Lines{ShowHeaderLine: tw.On},
			},
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignRight),
		tablewriter.WithRowAlignment(tw.AlignRight),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
	)
}

func num(v float64) string { return fmt.Sprintf("%g", v) }

// WriteGroupVerification renders verify-groups' result: per layout the
// allreduce before/after table and the communicator attributes, then the
// PASS/FAIL matrix of layouts by collectives and every mismatch.
func WriteGroupVerification(w io.Writer, v *results.GroupVerification) error {
	b := v.Backend
	fmt.Fprintf(w, "# %s %s: verify-groups\n", v.Tool.Name, v.Tool.Version)
	fmt.Fprintf(w, "# backend:  %s %s, %d ranks\n", b.Name, b.Version, v.Ranks)
	fmt.Fprintln(w, "# checks:   every collective in every group; rank r contributes r+1, then random exact patterns (out-of-place and in-place)")
	for _, l := range v.Layouts {
		if l.Stopped == results.NotStarted {
			continue // listed in the results and the summary
		}
		fmt.Fprintf(w, "#\n# layout %s: %s\n", l.Name, words.Groups(l.Groups))
		if len(l.Communicators) > maxRankRows {
			if err := rankRollup(w, l); err != nil {
				return err
			}
			continue
		}
		tb := PlainTable(w)
		tb.Header("world rank", "host", "group", "rank/size", "local rank/size", "before", "allreduce after", "expected")
		after := map[int]results.BeforeAfter{}
		for _, x := range l.AllReduce {
			after[x.WorldRank] = x
		}
		for _, c := range l.Communicators {
			x, ok := after[c.WorldRank]
			cells := []any{fmt.Sprint(c.WorldRank), c.Host, fmt.Sprintf("%d/%d", c.GroupID, c.GroupSize),
				fmt.Sprintf("%d/%d", c.Rank, c.Size), fmt.Sprintf("%d/%d", c.LocalRank, c.LocalSize)}
			if ok {
				cells = append(cells, num(x.Before), num(x.After), num(x.Want))
			} else {
				cells = append(cells, "-", "-", "-")
			}
			if err := tb.Append(cells...); err != nil {
				return err
			}
		}
		if err := tb.Render(); err != nil {
			return err
		}
	}
	if len(v.Layouts) > 0 {
		fmt.Fprintln(w, "#\n# results")
		tb := PlainTable(w)
		header := []any{"layout", "groups"}
		widest := v.Layouts[0]
		for _, l := range v.Layouts {
			if len(l.Collectives) > len(widest.Collectives) {
				widest = l
			}
		}
		for _, c := range widest.Collectives {
			header = append(header, c.Collective)
		}
		tb.Header(header...)
		for _, l := range v.Layouts {
			cells := []any{l.Name, words.Groups(l.Groups)}
			for _, c := range l.Collectives {
				if c.Skipped != "" {
					cells = append(cells, "skip")
				} else if c.Pass {
					cells = append(cells, "PASS")
				} else {
					cells = append(cells, fmt.Sprintf("FAIL(%d)", c.SimpleWrong+c.PatternWrong))
				}
			}
			for len(cells) < len(header) {
				cells = append(cells, "-")
			}
			if err := tb.Append(cells...); err != nil {
				return err
			}
		}
		if err := tb.Render(); err != nil {
			return err
		}
	}
	var fails []string
	for _, l := range v.Layouts {
		for _, c := range l.Collectives {
			for _, m := range c.Mismatches {
				fails = append(fails, fmt.Sprintf("# mismatch: layout %s, %s, rank %d, element %d: expected %s, got %s",
					l.Name, c.Collective, m.Rank, m.Index, m.Want, m.Got))
			}
			if c.Error != "" {
				fails = append(fails, fmt.Sprintf("# error: layout %s, %s: %s", l.Name, c.Collective, c.Error))
			}
			if c.Skipped != "" {
				fails = append(fails, fmt.Sprintf("# skip: layout %s, %s: %s", l.Name, c.Collective, c.Skipped))
			}
		}
	}
	if len(fails) > maxFailLines {
		fails = append(fails[:maxFailLines], fmt.Sprintf("# ... and %s more mismatches, errors and skips: every one is in the JSON (-o)", words.Count(len(fails)-maxFailLines)))
	}
	if len(fails) > 0 {
		fmt.Fprintln(w, strings.Join(fails, "\n"))
	}
	status := "PASS: every value matched"
	mismatched := false
	for _, l := range v.Layouts {
		for _, c := range l.Collectives {
			mismatched = mismatched || !c.Pass
		}
	}
	where := stoppedIn(v)
	switch {
	case mismatched:
		status = "FAIL: some values did not match"
	case v.Error != "" && where != "":
		status = "FAIL: not every layout was checked: " + where + ": " + v.Error
	case v.Error != "":
		// Every value checked matched; the check did not finish.
		status = "FAIL: not every layout was checked: " + v.Error
		most := 0
		for _, l := range v.Layouts {
			most = max(most, len(l.Collectives))
		}
		var short []string
		for _, l := range v.Layouts {
			if len(l.Collectives) < most || most == 0 {
				short = append(short, l.Name)
			}
		}
		if len(short) > 0 {
			status = fmt.Sprintf("FAIL: not every layout was checked: layout %s stopped: %s", strings.Join(short, ", "), v.Error)
		}
	case !v.OK:
		status = "FAIL: some values did not match"
	}
	fmt.Fprintf(w, "# %s\n", status)
	return nil
}

// stoppedIn says where a verify-groups run that stopped early stopped: the
// layout and its step, and how many layouts it never reached. It is empty
// for a result that does not say (written before Stopped existed).
func stoppedIn(v *results.GroupVerification) string {
	at := ""
	var rest []string
	for _, l := range v.Layouts {
		switch l.Stopped {
		case "":
		case results.NotStarted:
			rest = append(rest, l.Name)
		default:
			at = fmt.Sprintf("layout %s stopped at %s", l.Name, l.Stopped)
		}
	}
	if len(rest) > 0 {
		if at != "" {
			at += "; "
		}
		count, noun := len(rest), "layouts"
		if count == 1 {
			noun = "layout"
		}
		if len(rest) > 4 {
			rest = append(rest[:3], fmt.Sprintf("and %d more", len(rest)-3))
		}
		at += fmt.Sprintf("%d %s not started (%s)", count, noun, strings.Join(rest, ", "))
	}
	return at
}
