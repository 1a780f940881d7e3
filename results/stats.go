package results

import (
	"math"
	"sort"
)

// NewIterStats summarises samples (µs). Percentiles use the nearest rank.
func NewIterStats(samples []float64) *IterStats {
	if len(samples) == 0 {
		return nil
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	mean := sum / float64(len(s))
	var sq float64
	for _, v := range s {
		sq += (v - mean) * (v - mean)
	}
	st := &IterStats{Samples: len(s), MinUS: s[0], MaxUS: s[len(s)-1], MeanUS: mean,
		P50US: percentile(s, 0.50), P99US: percentile(s, 0.99)}
	if mean > 0 && len(s) > 1 {
		st.CV = math.Sqrt(sq/float64(len(s)-1)) / mean
	}
	return st
}

// percentile returns the nearest-rank percentile of sorted s.
func percentile(s []float64, p float64) float64 {
	k := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}
