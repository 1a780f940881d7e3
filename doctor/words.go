package doctor

import (
	"cmp"
	"fmt"
	"slices"
)

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// drop words v against its peers as a signed percentage, " (-49%)"; ""
// without peers.
func drop(v, peers float64) string {
	if peers <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%+.0f%%)", (v/peers-1)*100)
}

// sortedKeys is m's keys in order (an empty slice, not nil, for none).
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// mode is the most common of xs (the first to reach the top count).
func mode(xs []string) string {
	count := map[string]int{}
	best := ""
	for _, x := range xs {
		count[x]++
		if best == "" || count[x] > count[best] {
			best = x
		}
	}
	return best
}

// medianInt is the median of the positive xs, rounded; 0 for none.
func medianInt(xs []int) int {
	f := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 {
			f = append(f, float64(x))
		}
	}
	return int(median(f) + 0.5)
}

// median is the median of xs; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// gb words a figure for a table: "-" for 0, else three significant
// digits, or one decimal from 10 up.
func gb(v float64) string {
	if v == 0 {
		return "-"
	}
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
