package report

import (
	"strings"
	"testing"

	"collbench/results"
)

// TestAcceptanceJudgesOnlyMultiRankRows: rows at or above the size bound
// fail below the peak fraction; one-rank rows, and rows whose every group
// is one rank (halves of 2 GPUs, seen on 2x H200), move nothing over a link
// and are not judged, and a run of only those says it was skipped; alltoallv's
// uneven counts are not held against the peak, and a slow group row says
// which rank list it ran under.
func TestAcceptanceJudgesOnlyMultiRankRows(t *testing.T) {
	row := func(ranks int, busbw float64) results.Row {
		return results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 1 << 30, Ranks: ranks,
			OutOfPlace: &results.Half{TimeUS: 100, BusBW: busbw}}
	}
	v := func(ranks int, busbw float64) results.Row {
		r := row(ranks, busbw)
		r.Collective = "alltoallv"
		return r
	}
	grouped := func(ranks int, busbw float64) results.Row {
		r := row(ranks, busbw)
		r.Layout = "pairs"
		return r
	}
	// halves of a world of n ranks of one rank each (2 GPUs): verified,
	// nothing crosses a link, busbw 0.
	ones := func(n int) results.Row {
		r := grouped(n, 0)
		r.Layout = "halves"
		for g := 0; g < n; g++ {
			r.Groups = append(r.Groups, results.GroupResult{ID: g, Ranks: []int{g}, NoBandwidth: true})
		}
		return r
	}
	top := &results.TopologySummary{PeakGBps: 400}
	for _, tc := range []struct {
		name string
		rows []results.Row
		fail bool
		says string
	}{
		{"fast enough", []results.Row{row(4, 300)}, false, "every row of at least 1 GiB reached 60%"},
		{"too slow", []results.Row{row(4, 200)}, true, "busbw 200.0 GB/s is 50% of the 400.0 GB/s peak"},
		{"one rank only", []results.Row{row(1, 0)}, false, "skipped, no row of at least 1 GiB ran on two or more ranks"},
		{"one rank beside a slow row", []results.Row{row(1, 0), row(2, 100)}, true, "busbw 100.0 GB/s"},
		{"uneven alltoallv is not judged", []results.Row{row(4, 300), v(4, 100)}, false, "1 alltoallv rows not judged: their counts are uneven"},
		{"a slow group is named", []results.Row{grouped(2, 100)}, true, "allreduce float 1 GiB on pairs: busbw 100.0"},
		{"groups of one rank are not judged", []results.Row{ones(2), row(2, 300)}, false, "every row of at least 1 GiB reached 60%"},
		{"groups of one rank alone", []results.Row{ones(4)}, false, "skipped, no row of at least 1 GiB ran on two or more ranks"},
	} {
		var b strings.Builder
		got := Acceptance(&b, &results.Document{Topology: top, Results: tc.rows}, 1<<30, 0.6)
		if (len(got) > 0) != tc.fail || !strings.Contains(b.String(), tc.says) {
			t.Errorf("%s: failures %v, output %q", tc.name, got, b.String())
		}
	}
}
