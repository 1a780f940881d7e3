package facts

import (
	"cmp"
	"fmt"
	"slices"
)

// Plural is word, with an s unless n is 1.
func Plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// Drop words v against its peers as a signed percentage, " (-49%)"; ""
// without peers.
func Drop(v, peers float64) string {
	if peers <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%+.0f%%)", (v/peers-1)*100)
}

// SortedKeys is m's keys in order (an empty slice, not nil, for none).
func SortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Mode is the most common of xs (the first to reach the top count).
func Mode(xs []string) string {
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

// MedianInt is the median of the positive xs, rounded; 0 for none.
func MedianInt(xs []int) int {
	f := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 {
			f = append(f, float64(x))
		}
	}
	return int(Median(f) + 0.5)
}

// Median is the median of xs; 0 for none.
func Median(xs []float64) float64 {
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

// GB words a figure for a table: "-" for 0, else three significant
// digits, or one decimal from 10 up.
func GB(v float64) string {
	if v == 0 {
		return "-"
	}
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
