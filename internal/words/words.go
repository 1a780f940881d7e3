// Package words is how collbench writes numbers for people: byte counts,
// lists of ranks, and missing values, the same way in every report.
package words

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

var (
	binaryUnits = []string{"TiB", "GiB", "MiB", "KiB"}
	sizeUnits   = []string{"T", "G", "M", "K"}
	shifts      = []uint{40, 30, 20, 10}
)

// Bytes writes b exactly, in the largest binary unit that divides it:
// "8 B", "1 KiB", "3 MiB", "1536 B".
func Bytes(b int64) string {
	for i, s := range shifts {
		if b >= 1<<s && b%(1<<s) == 0 {
			return fmt.Sprintf("%d %s", b>>s, binaryUnits[i])
		}
	}
	return fmt.Sprintf("%d B", b)
}

// BytesApprox writes b to one decimal in the largest binary unit not above
// it: "8 B", "1.0 KiB", "1.5 KiB".
func BytesApprox(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

// SizeArg writes b as a --sizes value collbench reads back: "8", "1K",
// "64M", "1536".
func SizeArg(b int64) string {
	for i, s := range shifts {
		if b >= 1<<s && b%(1<<s) == 0 {
			return fmt.Sprintf("%d%s", b>>s, sizeUnits[i])
		}
	}
	return strconv.FormatInt(b, 10)
}

// Ints writes a list of numbers (ranks, GPUs) with runs of four or more
// as ranges, at most maxIntParts items and then how many more numbers:
// "0, 2, 5", "0-42, 44-63".
func Ints(xs []int) string {
	parts, counts := rangeParts(xs)
	if len(parts) <= maxIntParts {
		return strings.Join(parts, ", ")
	}
	shown := 0
	for _, c := range counts[:maxIntParts] {
		shown += c
	}
	return strings.Join(parts[:maxIntParts], ", ") + fmt.Sprintf(" and %s more", Count(len(xs)-shown))
}

// maxIntParts is the most numbers or ranges Ints writes.
const maxIntParts = 24

// OrDash writes s, or "-" when it is empty (a cell with nothing to say).
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Count writes n with thousands separated by commas: "8", "1,024",
// "65,536".
func Count(n int) string {
	s := strconv.Itoa(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return neg + s
}

// Ranges writes a list of numbers with runs of four or more consecutive
// ones as ranges, in their own order: "0-7", "0-3,8,10,11".
func Ranges(xs []int) string {
	parts, _ := rangeParts(xs)
	return strings.Join(parts, ",")
}

// rangeParts splits a list of numbers into the items Ranges writes (a
// number, or a run of four or more as "a-b") and how many numbers each
// item stands for.
func rangeParts(xs []int) ([]string, []int) {
	var parts []string
	var counts []int
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j-i >= 3 {
			parts, counts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j])), append(counts, j-i+1)
		} else {
			for _, x := range xs[i : j+1] {
				parts, counts = append(parts, strconv.Itoa(x)), append(counts, 1)
			}
		}
		i = j + 1
	}
	return parts, counts
}

// Group writes one group of ranks in brackets, runs as ranges: "[0-7]",
// "[1,6]".
func Group(g []int) string { return "[" + Ranges(g) + "]" }

// GroupExact writes one group of ranks exactly: "[1,2,3]".
func GroupExact(g []int) string {
	s := make([]string, len(g))
	for k, x := range g {
		s[k] = strconv.Itoa(x)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// GroupsFull writes groups of ranks exactly as collbench reads them back:
// "[[0,1],[2,3]]".
func GroupsFull(gs [][]int) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = GroupExact(g)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// MaxGroupsWidth is the widest a list of groups is written in a report
// line before it is shortened.
const MaxGroupsWidth = 72

// Groups writes groups of ranks for a person: exactly when short
// ("[[0,1],[2,3]]"), otherwise with runs as ranges ("[[0-7],[8-15]]"),
// and past MaxGroupsWidth as a count with the first groups and the last:
// "1,024 groups of 8: [[0-7],[8-15],[16-23],…,[8184-8191]]".
func Groups(gs [][]int) string {
	if s := GroupsFull(gs); len(s) <= MaxGroupsWidth {
		return s
	}
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = Group(g)
	}
	if s := "[" + strings.Join(parts, ",") + "]"; len(s) <= MaxGroupsWidth {
		return s
	}
	for i, g := range gs {
		parts[i] = groupShort(g)
	}
	head := fmt.Sprintf("%s groups %s: ", Count(len(gs)), groupSizes(gs))
	shown := []string{}
	width := len(head) + len(parts[len(parts)-1]) + 4
	for _, p := range parts[:len(parts)-1] {
		if width+len(p)+1 > MaxGroupsWidth && len(shown) > 0 {
			break
		}
		shown = append(shown, p)
		width += len(p) + 1
	}
	tail := ",…," + parts[len(parts)-1]
	if len(shown) == len(parts)-1 {
		tail = "," + parts[len(parts)-1]
	}
	return head + "[" + strings.Join(shown, ",") + tail + "]"
}

// groupShort writes one group with runs as ranges, and a long one as its
// first ranks and its last: "[0,2,4,…,62]".
func groupShort(g []int) string {
	const width = 24
	if s := Group(g); len(s) <= width || len(g) < 5 {
		return s
	}
	return fmt.Sprintf("[%d,%d,%d,…,%d]", g[0], g[1], g[2], g[len(g)-1])
}

// groupSizes words the sizes of groups: "of 8", "of 2-8 ranks".
func groupSizes(gs [][]int) string {
	lo, hi := len(gs[0]), len(gs[0])
	for _, g := range gs {
		lo, hi = min(lo, len(g)), max(hi, len(g))
	}
	if lo == hi {
		return "of " + strconv.Itoa(lo)
	}
	return fmt.Sprintf("of %d-%d ranks", lo, hi)
}

// Span renders a long duration in the largest unit that keeps it readable:
// 45s, 12 min, 5.2 h, 3.1 days, 1.2e+04 years.
func Span(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s < 60:
		return fmt.Sprintf("%.3gs", s)
	case s < 3600:
		return fmt.Sprintf("%.3g min", s/60)
	case s < 48*3600:
		return fmt.Sprintf("%.3g h", s/3600)
	case s < 2*365*24*3600:
		return fmt.Sprintf("%.3g days", s/(24*3600))
	}
	return fmt.Sprintf("%.3g years", s/(365.25*24*3600))
}
