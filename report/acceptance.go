package report

import (
	"fmt"
	"io"

	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
)

// Acceptance checks that d's rows of at least minSize reach frac of the
// machine's peak, says so on w, and returns the failures (none: nil).
func Acceptance(w io.Writer, d *results.Document, minSize int64, frac float64) []string {
	if d.Topology == nil || d.Topology.PeakGBps <= 0 {
		fmt.Fprintln(w, "# acceptance: skipped, the peak bandwidth of this machine is unknown (no NVLink or NIC peak detected)")
		return nil
	}
	peak := d.Topology.PeakGBps
	var bad []string
	judged, uneven := 0, 0
	for _, r := range d.Results {
		if r.SizeBytes < minSize || r.OneRank() {
			continue
		}
		if !measure.PeakComparable(r.Collective) {
			uneven++
			continue
		}
		judged++
		where := ""
		if r.Layout != "" {
			where = " on " + r.Layout
		}
		for _, h := range r.Halves() {
			if h.BusBW < frac*peak {
				bad = append(bad, fmt.Sprintf("%s %s %s%s: busbw %.1f GB/s is %.0f%% of the %.1f GB/s peak (< %.0f%%)",
					r.Collective, r.DType, words.Bytes(r.SizeBytes), where, h.BusBW, h.BusBW/peak*100, peak, frac*100))
			}
		}
	}
	if uneven > 0 {
		fmt.Fprintf(w, "# acceptance: %d alltoallv rows not judged: their counts are uneven by design, so busbw is set by the busiest rank, not by the links\n", uneven)
	}
	if judged == 0 {
		fmt.Fprintf(w, "# acceptance: skipped, no row of at least %s ran on two or more ranks\n", words.Bytes(minSize))
		return nil
	}
	for _, b := range bad {
		fmt.Fprintf(w, "# acceptance FAIL: %s\n", b)
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "# acceptance: every row of at least %s reached %.0f%% of the %.1f GB/s peak\n", words.Bytes(minSize), frac*100, peak)
		return nil
	}
	return []string{fmt.Sprintf("%d rows below %.0f%% of peak", len(bad), frac*100)}
}
