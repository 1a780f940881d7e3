package report

import (
	"fmt"
	"io"
	"strings"

	"collbench/internal/words"
	"collbench/results"
)

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
	if c.Bitwise > 0 {
		extra += fmt.Sprintf(", bitwise %d", c.Bitwise)
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

func memBytes(b int64) string {
	if b < 0 {
		return "unknown"
	}
	return words.Bytes(b)
}
