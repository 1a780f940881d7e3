package doctor

import (
	"fmt"
	"slices"
)

func sortedKeysS[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func drop(v, peers float64) string {
	if peers <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%+.0f%%)", (v/peers-1)*100)
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

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

func medianInt(xs []int) int {
	f := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 {
			f = append(f, float64(x))
		}
	}
	return int(median(f) + 0.5)
}

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

func gb(v float64) string {
	if v == 0 {
		return "-"
	}
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
