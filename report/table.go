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

// WriteHeader writes the '#' block that describes a run: tool, backend,
// ranks, host, command and settings.
func WriteHeader(w io.Writer, d *results.Document) {
	title := strings.Join(d.Config.Collectives, ", ")
	fmt.Fprintf(w, "# %s %s: %s\n", d.Tool.Name, d.Tool.Version, title)
	b := d.Environment.Backend
	var bits []string
	for _, s := range []string{b.Version, b.Library, b.Driver} {
		if s != "" {
			bits = append(bits, s)
		}
	}
	if b.Transport != "" {
		bits = append(bits, "over "+b.Transport)
	}
	line := b.Name
	if len(bits) > 0 {
		line += " (" + strings.Join(bits, "; ") + ")"
	}
	if b.Reason != "" {
		line += " [" + b.Reason + "]"
	}
	fmt.Fprintf(w, "# backend:  %s\n", line)
	fmt.Fprintf(w, "# ranks:    %d%s\n", d.Config.Ranks, devicesLine(b.Devices))
	fmt.Fprintf(w, "# host:     %s (%s/%s)\n", d.Environment.Host, d.Environment.OS, d.Environment.Arch)
	if len(d.Command) > 0 {
		fmt.Fprintf(w, "# command:  %s\n", strings.Join(d.Command, " "))
	}
	c := d.Config
	extra := ""
	if c.CUDAGraph > 0 {
		extra += fmt.Sprintf(", cuda-graph %d replays", c.CUDAGraph)
	}
	if c.IterStats {
		extra += ", iter-stats"
	}
	if c.Threads == "one" && c.Ranks > 1 && c.Processes == 0 {
		extra += ", one thread issuing for every GPU"
	}
	if c.Agg > 1 {
		extra += fmt.Sprintf(", agg %d", c.Agg)
	}
	if c.Blocking > 0 {
		extra += fmt.Sprintf(", blocking %d", c.Blocking)
	}
	if c.Misalign > 0 {
		extra += fmt.Sprintf(", misalign %d", c.Misalign)
	}
	switch {
	case c.Stable:
		extra += fmt.Sprintf(", cycles until stable, at most %d (each row: the median cycle)", c.Cycles)
	case c.Cycles > 1:
		extra += fmt.Sprintf(", cycles %d (each row: the median cycle)", c.Cycles)
	}
	if c.Register != "" {
		extra += ", registered " + c.Register
	}
	if c.CPUTime {
		extra += ", cputime"
	}
	fmt.Fprintf(w, "# settings: iters %d, warmup %d, check %d, mode %s, average %s, seed %d%s\n",
		c.Iters, c.Warmup, c.Check, c.Mode, c.Average, c.Seed, extra)
	if t := d.Topology; t != nil {
		if t.Fingerprint != "" {
			fmt.Fprintf(w, "# topology: %s [fingerprint %s]\n", t.Summary, t.Fingerprint)
		} else {
			fmt.Fprintf(w, "# topology: %s\n", t.Summary)
		}
		if t.PeakGBps > 0 {
			fmt.Fprintf(w, "# peak:     %.1f GB/s (%s); %%peak = busbw / peak\n", t.PeakGBps, t.PeakLabel)
		} else if t.PeakLabel != "" {
			fmt.Fprintf(w, "# peak:     %s\n", t.PeakLabel)
		}
	}
	if len(c.Groups) > 1 {
		given := c.RankList
		if len(given) > words.MaxGroupsWidth {
			given = given[:words.MaxGroupsWidth-1] + "…"
		}
		fmt.Fprintf(w, "# groups:   %s -> %s (%s groups, run concurrently; busbw per group uses its own rank count, the sum line adds them)\n",
			given, words.Groups(c.Groups), words.Count(len(c.Groups)))
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "# note:     %s\n", n)
	}
	if len(d.Environment.Env) > 0 {
		keys := sortedKeys(d.Environment.Env)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+d.Environment.Env[k])
		}
		fmt.Fprintf(w, "# env:      %s\n", strings.Join(kv, " "))
	}
}

func devicesLine(devs []results.Device) string {
	if len(devs) == 0 {
		return ""
	}
	if len(devs) > maxListedDevices {
		return devicesSummary(devs)
	}
	// Collapse identical device names into one entry.
	same := true
	for _, d := range devs {
		if d.Name != devs[0].Name {
			same = false
		}
	}
	if same && len(devs) > 1 {
		var ids []string
		for _, d := range devs {
			if d.BusID != "" {
				ids = append(ids, d.BusID)
			}
		}
		if len(ids) == 0 {
			return fmt.Sprintf(" on %s", devs[0].Name)
		}
		return fmt.Sprintf(" on %s [%s]", devs[0].Name, strings.Join(ids, ", "))
	}
	var parts []string
	for _, d := range devs {
		s := fmt.Sprintf("%d: %s", d.Rank, d.Name)
		if d.BusID != "" {
			s += " [" + d.BusID + "]"
		}
		parts = append(parts, s)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// maxListedDevices is the most devices the header lists one by one.
const maxListedDevices = 8

// devicesSummary words many devices in one short line: each model with how
// many ranks have it (and which, when there are several models), and the
// distinct bus ids they sit at, the first few listed.
func devicesSummary(devs []results.Device) string {
	var names []string
	ranks := map[string][]int{}
	buses := map[string]bool{}
	var busOrder []string
	for _, d := range devs {
		if _, ok := ranks[d.Name]; !ok {
			names = append(names, d.Name)
		}
		ranks[d.Name] = append(ranks[d.Name], d.Rank)
		if d.BusID != "" && !buses[d.BusID] {
			buses[d.BusID] = true
			busOrder = append(busOrder, d.BusID)
		}
	}
	var parts []string
	for _, n := range names {
		s := fmt.Sprintf("%d× %s", len(ranks[n]), n)
		if len(names) > 1 {
			s += " (ranks " + rankRanges(ranks[n], 4) + ")"
		}
		parts = append(parts, s)
	}
	out := " on " + strings.Join(parts, ", ")
	if len(busOrder) > 0 {
		shown := busOrder[:min(len(busOrder), 4)]
		more := ""
		if len(busOrder) > len(shown) {
			more = fmt.Sprintf(", %d more", len(busOrder)-len(shown))
		}
		out += fmt.Sprintf(" at %d bus id(s) [%s%s]", len(busOrder), strings.Join(shown, ", "), more)
	}
	return out
}

// rankRanges words sorted ranks as ranges ("0-7, 16-23"), the first limit
// of them, then how many more.
func rankRanges(rs []int, limit int) string {
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		} else {
			parts = append(parts, fmt.Sprint(rs[i]))
		}
		i = j + 1
	}
	if len(parts) > limit {
		return strings.Join(parts[:limit], ", ") + fmt.Sprintf(" and %d more ranges", len(parts)-limit)
	}
	return strings.Join(parts, ", ")
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

func memBytes(b int64) string {
	if b < 0 {
		return "unknown"
	}
	return words.Bytes(b)
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

// stragglerLine names the rank that was slowest most often, with its host,
// over the rows of at least 1 MiB (all rows when there are none).
func stragglerLine(rows []results.Row, comms []results.CommInfo) string {
	const band = 1 << 20
	var halves []*results.Half
	scope := "at >= 1 MiB"
	for _, big := range []bool{true, false} {
		if !big {
			scope = "over all sizes"
		}
		for _, r := range rows {
			if big && r.SizeBytes < band {
				continue
			}
			for _, h := range r.Halves() {
				if len(h.RankTimeUS) > 1 {
					halves = append(halves, h)
				}
			}
		}
		if len(halves) > 0 {
			break
		}
	}
	if len(halves) == 0 {
		return ""
	}
	wins := map[int]int{}
	excess := map[int]float64{}
	for _, h := range halves {
		slow, sum := 0, 0.0
		for i, t := range h.RankTimeUS {
			sum += t
			if t > h.RankTimeUS[slow] {
				slow = i
			}
		}
		mean := sum / float64(len(h.RankTimeUS))
		wins[slow]++
		if mean > 0 {
			excess[slow] += h.RankTimeUS[slow]/mean - 1
		}
	}
	worst := -1
	for r, n := range wins {
		if worst < 0 || n > wins[worst] || (n == wins[worst] && r < worst) {
			worst = r
		}
	}
	if by := excess[worst] / float64(wins[worst]) * 100; by < 1 {
		return fmt.Sprintf("# slowest rank:      none stands out: every rank within 1%% of the ranks' mean in %d measurements %s", len(halves), scope)
	}
	host := ""
	if worst < len(comms) && comms[worst].Host != "" {
		host = " on " + comms[worst].Host
	}
	return fmt.Sprintf("# slowest rank:      %d%s, slowest in %d of %d measurements %s, by %.1f%% over the ranks' mean",
		worst, host, wins[worst], len(halves), scope, excess[worst]/float64(wins[worst])*100)
}

// movesData reports whether any row moved data between ranks: false only
// when every row ran in groups of one rank.
func movesData(rows []results.Row) bool {
	for _, r := range rows {
		if len(r.Groups) == 0 {
			return true
		}
		for _, g := range r.Groups {
			if !g.NoBandwidth {
				return true
			}
		}
	}
	return false
}

// lateKernel names the rank whose kernel started last in the recorded
// half and by how much after the earliest, on GPU timers aligned to the
// host's clock ("3 +12.5": rank 3, 12.5 µs late), or, where no rank is
// later than the alignment's error, that error ("±2.1"); "" when nothing
// was recorded or the clocks could not be compared. ranks maps the half's
// rank order to world ranks (nil: the same).
func lateKernel(o, i *results.Half, ranks []int) string {
	l, ok := lateOf(o, i, ranks)
	switch {
	case !ok:
		return ""
	case l.late:
		return fmt.Sprintf("%d +%s", l.rank, trimFloat(l.by))
	}
	return "±" + trimFloat(l.err)
}

// lateness is a recorded half's latest kernel start.
type lateness struct {
	rank    int
	by, err float64 // µs after the earliest; the clocks' error on that
	late    bool    // by exceeds err
}

// lateOf finds the half's latest kernel start (the first half recorded of
// o and i), where the ranks' clocks were aligned.
func lateOf(o, i *results.Half, ranks []int) (lateness, bool) {
	for _, h := range []*results.Half{o, i} {
		if h == nil || h.Kernels == nil || len(h.Kernels.StartUS) < 2 || len(h.Kernels.ClockErrorUS) != len(h.Kernels.StartUS) {
			continue
		}
		k := h.Kernels
		at, first := -1, -1
		for r, s := range k.StartUS {
			if s < 0 {
				continue
			}
			if at < 0 || s > k.StartUS[at] {
				at = r
			}
			if first < 0 || s < k.StartUS[first] {
				first = r
			}
		}
		if at < 0 {
			continue
		}
		l := lateness{rank: at, by: k.StartUS[at] - k.StartUS[first], err: k.ClockErrorUS[at] + k.ClockErrorUS[first]}
		l.late = l.by > l.err
		if !l.late {
			// No rank stands out: the error of the least certain pair.
			for _, e := range k.ClockErrorUS {
				l.err = max(l.err, e+k.ClockErrorUS[first])
			}
		}
		if at < len(ranks) {
			l.rank = ranks[at]
		}
		return l, true
	}
	return lateness{}, false
}

// ranksOf is the world ranks of the group a table line stands for ("" or
// "sum": nil, the row's own order).
func ranksOf(r results.Row, label string) []int {
	for _, g := range r.Groups {
		if label == fmt.Sprintf("%d %s", g.ID, words.Group(g.Ranks)) {
			return g.Ranks
		}
	}
	return nil
}

// trimFloat writes a time in µs to a tenth, or whole above 100.
func trimFloat(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// lateLine says which rank's kernel started last most often over the
// rows the library recorded, beyond the clocks' alignment error, and by
// how much at most: one line, whatever the ranks.
func lateLine(rows []results.Row) string {
	count := map[int]int{}
	recorded, late := 0, 0
	most, errMax := 0.0, 0.0
	for _, r := range rows {
		l, ok := lateOf(r.OutOfPlace, r.InPlace, nil)
		if !ok {
			continue
		}
		recorded++
		errMax = max(errMax, l.err)
		if !l.late {
			continue
		}
		late++
		count[l.rank]++
		most = max(most, l.by)
	}
	if recorded == 0 {
		return ""
	}
	if late == 0 {
		return fmt.Sprintf("# late kernel:       none in %d recorded rows: every rank's kernel started within the clocks' alignment error (at most ±%s us; GPU timers aligned to the host clock)",
			recorded, trimFloat(errMax))
	}
	top, n := -1, 0
	for r, c := range count {
		if c > n || (c == n && r < top) {
			top, n = r, c
		}
	}
	return fmt.Sprintf("# late kernel:       rank %d started last in %d of %d recorded rows, at most %s us after the earliest rank (GPU timers aligned to the host clock; beyond an error of at most ±%s us)",
		top, n, recorded, trimFloat(most), trimFloat(errMax))
}
