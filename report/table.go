// Package report renders result documents: the bandwidth table, CSV and JSON.
package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"collbench/internal/words"
	"collbench/results"
)

// Format is an output format.
type Format string

// The output formats.
const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
	FormatCSV   Format = "csv"
)

// ParseFormat accepts table, json or csv.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatTable, FormatJSON, FormatCSV:
		return f, nil
	}
	return "", fmt.Errorf("unknown --format %q (valid: table, json, csv)", s)
}

// Write renders d in format f.
func Write(w io.Writer, d *results.Document, f Format) error {
	switch f {
	case FormatJSON:
		return results.Write(w, d)
	case FormatCSV:
		return WriteCSV(w, d)
	default:
		return WriteTable(w, d)
	}
}

// WriteTable writes the header block and one bandwidth table per collective,
// each followed by its wrong-element and average bus bandwidth lines.
func WriteTable(w io.Writer, d *results.Document) error {
	WriteHeader(w, d)
	groups, order := byCollective(d.Results)
	sum := results.Summarize(d.Results, d.Error != "")
	for i, name := range order {
		rows := groups[name]
		fmt.Fprintln(w, "#")
		if len(order) > 1 || i > 0 {
			fmt.Fprintf(w, "# %s\n", name)
		}
		peak := 0.0
		if d.Topology != nil {
			peak = d.Topology.PeakGBps
		}
		if err := writeRows(w, rows, peak, d.Config.Explain); err != nil {
			return err
		}
		writeMismatches(w, rows)
		for _, cs := range sum.PerColl {
			if cs.Collective == name {
				status := "OK"
				if cs.WrongTotal > 0 {
					status = "FAILED"
				}
				fmt.Fprintf(w, "# wrong elements:    %d (%s)\n", cs.WrongTotal, status)
				writeBitwise(w, rows)
				if movesData(rows) {
					fmt.Fprintf(w, "# avg bus bandwidth: %.3f GB/s\n", cs.AvgBusBW)
				} else {
					fmt.Fprintln(w, "# avg bus bandwidth: n/a (every group is a single rank: no data moved between ranks)")
				}
				if line := stragglerLine(rows, d.Communicators); line != "" {
					fmt.Fprintln(w, line)
				}
				if line := lateLine(rows); line != "" {
					fmt.Fprintln(w, line)
				}
			}
		}
	}
	if len(d.Results) == 0 {
		fmt.Fprintln(w, "#\n# no results")
	}
	if m := d.Memory; m != nil {
		fmt.Fprintf(w, "# memory:            communicators %s, buffers %s per rank, collectives %s on top", memBytes(m.LibraryBytes), memBytes(m.BufferBytes), memBytes(m.CollectiveBytes))
		if m.Note != "" {
			fmt.Fprintf(w, " (%s)", m.Note)
		}
		fmt.Fprintln(w)
	}
	if d.Error != "" {
		fmt.Fprintf(w, "# stopped early: %s\n", d.Error)
	}
	return nil
}

func byCollective(rows []results.Row) (map[string][]results.Row, []string) {
	groups := map[string][]results.Row{}
	var order []string
	for _, r := range rows {
		if _, ok := groups[r.Collective]; !ok {
			order = append(order, r.Collective)
		}
		groups[r.Collective] = append(groups[r.Collective], r)
	}
	return groups, order
}

// columns says which optional columns a table has.
type columns struct {
	stats  bool // per-iteration statistics
	cycles bool // the time range over cycles
	cpu    bool // host time of issuing
}

// writeRows writes the rows of one collective as the table NCCL's
// benchmark prints, with the columns the rows carry (groups, cycles,
// algorithm, late kernels).
func writeRows(w io.Writer, rows []results.Row, peak float64, explain bool) error {
	oop, ip := false, false
	var cols columns
	algo := false
	for _, r := range rows {
		oop = oop || r.OutOfPlace != nil
		ip = ip || r.InPlace != nil
		algo = algo || (explain && r.Algorithm != nil)
		for _, h := range r.Halves() {
			cols.stats = cols.stats || h.Iter != nil
			cols.cycles = cols.cycles || h.Cycles != nil
			cols.cpu = cols.cpu || h.CPUTimeUS > 0
		}
	}
	stats := cols
	grouped := false
	for _, r := range rows {
		grouped = grouped || len(r.Groups) > 0
	}
	late := false
	for _, r := range rows {
		late = late || lateKernel(r.OutOfPlace, r.InPlace, nil) != ""
		for _, g := range r.Groups {
			late = late || lateKernel(g.OutOfPlace, g.InPlace, g.Ranks) != ""
		}
	}
	header := []any{"\nsize", "\ncount", "\ntype", "\nredop", "\nroot"}
	if algo {
		header = append(header, "\nalgorithm\n")
	}
	if late {
		header = append(header, "late\nkernel\n(us)")
	}
	if grouped {
		header = append([]any{"\ngroup"}, header...)
	}
	halfHeader := func(label string) []any {
		h := []any{label + "\ntime\n(us)", "\nalgbw\n(GB/s)", "\nbusbw\n(GB/s)"}
		if peak > 0 {
			h = append(h, "\n%peak\n")
		}
		h = append(h, "\n#wrong\n")
		if stats.cycles {
			h = append(h, "\ncycles\nmin (us)", "\ncycles\nmax (us)")
		}
		if stats.cpu {
			h = append(h, "\ncpu\n(us)")
		}
		if stats.stats {
			h = append(h, "\np50\n(us)", "\np99\n(us)", "\nmin\n(us)", "\nmax\n(us)", "\nCV\n(%)")
		}
		return h
	}
	if oop {
		header = append(header, halfHeader("out-of-place")...)
	}
	if ip {
		header = append(header, halfHeader("in-place")...)
	}
	tb := PlainTable(w)
	tb.Header(header...)
	for _, r := range rows {
		root := "-"
		if r.Root >= 0 {
			root = fmt.Sprint(r.Root)
		}
		line := func(label string, size, count int64, o, i *results.Half, noBW bool) error {
			cells := []any{words.Bytes(size), fmt.Sprint(count), r.DType, r.Op, root}
			if algo {
				cells = append(cells, r.Algorithm.String())
			}
			if late {
				k := "-"
				if label != "sum" {
					if v := lateKernel(o, i, ranksOf(r, label)); v != "" {
						k = v
					}
				}
				cells = append(cells, k)
			}
			if grouped {
				cells = append([]any{label}, cells...)
			}
			p := peak
			if label == "sum" && peak > 0 {
				p = -1 // a sum over groups has no single peak
			}
			if r.OneRank() && peak > 0 {
				p = -1 // one rank moves nothing over a link
			}
			if oop {
				cells = append(cells, withPeak(halfCellsBW(o, stats, noBW), o, p, noBW)...)
			}
			if ip {
				cells = append(cells, withPeak(halfCellsBW(i, stats, noBW), i, p, noBW)...)
			}
			return tb.Append(cells...)
		}
		if !grouped {
			if err := line("", r.SizeBytes, r.Count, r.OutOfPlace, r.InPlace, false); err != nil {
				return err
			}
			continue
		}
		for _, g := range listedGroups(r.Groups) {
			if err := line(fmt.Sprintf("%d %s", g.ID, words.Group(g.Ranks)), g.SizeBytes, g.Count, g.OutOfPlace, g.InPlace, g.NoBandwidth); err != nil {
				return err
			}
		}
		// With every group a single rank nothing moved: the sum has no
		// bandwidth either.
		allAlone := len(r.Groups) > 0
		for _, g := range r.Groups {
			allAlone = allAlone && g.NoBandwidth
		}
		if err := line("sum", r.SizeBytes, r.Count, r.OutOfPlace, r.InPlace, allAlone); err != nil {
			return err
		}
	}
	if err := tb.Render(); err != nil {
		return err
	}
	if grouped {
		if n := maxGroups(rows); n > maxListedGroups {
			fmt.Fprintf(w, "# groups: %s per size; each size lists the %d that stand out (wrong elements first, then the slowest) and the sum; every group is in the JSON (-o)\n",
				words.Count(n), standOut)
		}
		note := "# sum: the slowest group's time, bandwidths added over groups"
		for _, r := range rows {
			for _, g := range r.Groups {
				if g.NoBandwidth {
					note = "# n/a: a group of one rank is verified but moves no data between GPUs; sum: the slowest group's time, bandwidths added over the other groups"
				}
			}
		}
		fmt.Fprintln(w, note)
	}
	return nil
}

// maxListedGroups is the most groups a size lists one row each; past it
// the table lists the standOut groups that stand out most.
const (
	maxListedGroups = 8
	standOut        = 4
)

// maxGroups is the most groups any row has.
func maxGroups(rows []results.Row) int {
	n := 0
	for _, r := range rows {
		n = max(n, len(r.Groups))
	}
	return n
}

// listedGroups is every group of a row when there are few, otherwise the
// maxListedGroups that stand out: those with wrong elements first, then the
// slowest: standOut of them, each kept in group order.
func listedGroups(gs []results.GroupResult) []results.GroupResult {
	if len(gs) <= maxListedGroups {
		return gs
	}
	wrongs := func(g results.GroupResult) int64 {
		var n int64
		for _, h := range g.Halves() {
			if h.Wrong != nil {
				n += *h.Wrong
			}
		}
		return n
	}
	slowest := func(g results.GroupResult) float64 {
		t := 0.0
		for _, h := range g.Halves() {
			t = max(t, h.TimeUS)
		}
		return t
	}
	order := make([]int, len(gs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if wa, wb := wrongs(gs[a]), wrongs(gs[b]); wa != wb {
			return cmp.Compare(wb, wa)
		}
		return cmp.Compare(slowest(gs[b]), slowest(gs[a]))
	})
	keep := order[:standOut]
	slices.Sort(keep)
	out := make([]results.GroupResult, len(keep))
	for i, k := range keep {
		out[i] = gs[k]
	}
	return out
}

// withPeak inserts the %peak cell after busbw when a peak is known (peak
// > 0), or a dash where the column exists but has no meaning (peak < 0).
func withPeak(cells []any, h *results.Half, peak float64, noBW bool) []any {
	if peak == 0 {
		return cells
	}
	pct := "-"
	if h != nil && peak > 0 && !noBW {
		pct = fmt.Sprintf("%.1f", h.BusBW/peak*100)
	}
	out := append([]any{}, cells[:3]...)
	out = append(out, pct)
	return append(out, cells[3:]...)
}

// halfCellsBW is halfCells with n/a bandwidth for groups of one rank.
func halfCellsBW(h *results.Half, stats columns, noBW bool) []any {
	cells := halfCells(h, stats)
	if noBW && h != nil {
		cells[1], cells[2] = "n/a", "n/a"
	}
	return cells
}

func halfCells(h *results.Half, cols columns) []any {
	extra := 0
	if cols.cycles {
		extra += 2
	}
	if cols.cpu {
		extra++
	}
	if cols.stats {
		extra += 5
	}
	if h == nil {
		out := []any{"-", "-", "-", "-"}
		for k := 0; k < extra; k++ {
			out = append(out, "-")
		}
		return out
	}
	wrong := "N/A"
	if h.Wrong != nil {
		wrong = fmt.Sprint(*h.Wrong)
	}
	out := []any{FormatTime(h.TimeUS), fmt.Sprintf("%.2f", h.AlgBW), fmt.Sprintf("%.2f", h.BusBW), wrong}
	if cols.cycles {
		if c := h.Cycles; c != nil {
			out = append(out, FormatTime(c.TimeMinUS), FormatTime(c.TimeMaxUS))
		} else {
			out = append(out, "-", "-")
		}
	}
	if cols.cpu {
		out = append(out, FormatTime(h.CPUTimeUS))
	}
	if cols.stats {
		if s := h.Iter; s != nil {
			out = append(out, FormatTime(s.P50US), FormatTime(s.P99US), FormatTime(s.MinUS), FormatTime(s.MaxUS), fmt.Sprintf("%.1f", s.CV*100))
		} else {
			out = append(out, "-", "-", "-", "-", "-")
		}
	}
	return out
}

// FormatTime writes microseconds with the precision NCCL's benchmark uses:
// two decimals below 100 µs, one below 10 ms, none above.
func FormatTime(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%.0f", us)
	case us >= 100:
		return fmt.Sprintf("%.1f", us)
	}
	return fmt.Sprintf("%.2f", us)
}

// writeMismatches lists the first wrong elements of each failing half.
func writeMismatches(w io.Writer, rows []results.Row) {
	for _, r := range rows {
		for _, m := range []struct {
			name string
			h    *results.Half
		}{{"out-of-place", r.OutOfPlace}, {"in-place", r.InPlace}} {
			if m.h == nil {
				continue
			}
			for _, x := range m.h.Mismatches {
				fmt.Fprintf(w, "# mismatch: %s %s %s size %s %s: rank %d element %d: want %s, got %s\n",
					r.Collective, r.DType, r.Op, words.Bytes(r.SizeBytes), m.name, x.Rank, x.Index, x.Want, x.Got)
			}
		}
	}
}
