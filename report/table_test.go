package report

import (
	"fmt"
	"strings"
	"testing"

	"collbench/results"
)

// TestDevicesLineAtScale: up to eight devices are listed one by one; a
// world of 8,192 ranks on 1,024 hosts is one short line with the model,
// the count and the bus ids, and a world of mixed models says which ranks
// have which.
func TestDevicesLineAtScale(t *testing.T) {
	bus := func(r int) string { return fmt.Sprintf("0000:%02x:00.0", 0x18+0x10*(r%8)) }
	var few, many, mixed []results.Device
	for r := 0; r < 8192; r++ {
		d := results.Device{Rank: r, Name: "NVIDIA H100 80GB HBM3", BusID: bus(r)}
		if r < 4 {
			few = append(few, d)
		}
		many = append(many, d)
		if r >= 16 && r < 24 {
			d.Name = "NVIDIA A100-SXM4-80GB"
		}
		mixed = append(mixed, d)
	}
	if got, want := devicesLine(few), " on NVIDIA H100 80GB HBM3 [0000:18:00.0, 0000:28:00.0, 0000:38:00.0, 0000:48:00.0]"; got != want {
		t.Errorf("4 devices: %q, want %q", got, want)
	}
	want := " on 8192× NVIDIA H100 80GB HBM3 at 8 bus id(s) [0000:18:00.0, 0000:28:00.0, 0000:38:00.0, 0000:48:00.0, 4 more]"
	if got := devicesLine(many); got != want {
		t.Errorf("8,192 devices: %q, want %q", got, want)
	}
	got := devicesLine(mixed)
	for _, w := range []string{"8184× NVIDIA H100 80GB HBM3 (ranks 0-15, 24-8191)", "8× NVIDIA A100-SXM4-80GB (ranks 16-23)"} {
		if !strings.Contains(got, w) {
			t.Errorf("mixed: %q lacks %q", got, w)
		}
	}
	if len(got) > 200 {
		t.Errorf("mixed: %d characters", len(got))
	}
	var scattered []int
	for r := 0; r < 100; r += 2 {
		scattered = append(scattered, r)
	}
	if got := rankRanges(scattered, 4); got != fmt.Sprintf("0, 2, 4, 6 and %d more ranges", 46) {
		t.Errorf("scattered ranks: %q", got)
	}
}

// TestLateLineSpeaksOfTheLateRowsError: the summary's error is that of
// the rows where a rank started late beyond it, not the widest of every
// row (4x H200: "6.7 us after the earliest rank ... beyond an error of at
// most ±32.7 us" read as a contradiction; the ±32.7 was another row's).
func TestLateLineSpeaksOfTheLateRowsError(t *testing.T) {
	row := func(start, errs []float64) results.Row {
		return results.Row{OutOfPlace: &results.Half{Kernels: &results.KernelTimes{StartUS: start, ClockErrorUS: errs}}}
	}
	rows := []results.Row{
		row([]float64{0, 5, 3, 1}, []float64{16, 16, 16, 16}),   // within ±32: nobody late
		row([]float64{0, 6.7, 1, 2}, []float64{1, 1, 0.5, 0.5}), // rank 1, 6.7 beyond ±2
	}
	got := lateLine(rows)
	want := "rank 1 started last in 1 of 2 recorded rows, at most 6.7 us after the earliest rank (GPU timers aligned to the host clock; beyond an error of at most ±2.0 us)"
	if !strings.Contains(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := lateLine(rows[:1]); !strings.Contains(got, "none in 1 recorded rows") || !strings.Contains(got, "±32.0 us") {
		t.Errorf("no one late: %q", got)
	}
}

// TestLateLineSaysWhenTheLateRankCalled: where the rows carry each rank's
// call of the operation (host clock alone), the summary says how late the
// late rank called it, so a late start with an on-time call reads as late
// on the GPU, not in the issuing.
func TestLateLineSaysWhenTheLateRankCalled(t *testing.T) {
	row := func(start, calls []float64) results.Row {
		return results.Row{OutOfPlace: &results.Half{Kernels: &results.KernelTimes{StartUS: start, ClockErrorUS: []float64{1, 1}, EnqueueUS: calls}}}
	}
	rows := []results.Row{
		row([]float64{0, 187}, []float64{0, 2.5}),
		row([]float64{0, 40}, []float64{0.4, 0}),
		row([]float64{30, 0}, []float64{0, 9}), // rank 0 late here
	}
	got := lateLine(rows)
	want := "rank 1 started last in 2 of 3 recorded rows, at most 187 us after the earliest rank (GPU timers aligned to the host clock; beyond an error of at most ±2.0 us); it called the operation at most 2.5 us after the earliest rank's call; other ranks started last in 1 more (the latest rank 0, 30.0 us after the earliest, its call at most 0.0 us after)"
	if got != "# late kernel:       "+want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	rows[0].OutOfPlace.Kernels.EnqueueUS, rows[1].OutOfPlace.Kernels.EnqueueUS = nil, nil
	if got := lateLine(rows); strings.Contains(got, "called") {
		t.Errorf("no calls recorded, yet: %q", got)
	}
}

// TestLateLineSpeaksOfTheNamedRanksRows: the summary's "at most" is the
// named rank's latest start, not another rank's (4x H200, launch -n 4:
// "rank 2 started last in 2 of 4 recorded rows, at most 613 us" where
// rank 2 was 24.3 us late at most and the 613 us was rank 0's, at 8 B);
// the other ranks' late rows are counted, with the latest of them.
func TestLateLineSpeaksOfTheNamedRanksRows(t *testing.T) {
	row := func(start, errs, calls []float64) results.Row {
		return results.Row{OutOfPlace: &results.Half{Kernels: &results.KernelTimes{StartUS: start, ClockErrorUS: errs, EnqueueUS: calls}}}
	}
	rows := []results.Row{
		row([]float64{613.1, 342.8, 431.6, 0}, []float64{27.1, 1.6, 1.3, 1.8}, []float64{587.8, 342.7, 432.1, 0}),
		row([]float64{7.2, 175.6, 16.6, 0}, []float64{1.4, 1.5, 1.2, 1.7}, []float64{7.2, 176.1, 17.3, 0}),
		row([]float64{0, 20.2, 24.3, 1.0}, []float64{1.4, 1.4, 1.1, 1.6}, []float64{0, 20.7, 24.8, 1.4}),
		row([]float64{0, 0, 22.5, 0}, []float64{0.9, 1.1, 1.1, 1.2}, []float64{0.3, 0, 22.1, 0.2}),
	}
	got := lateLine(rows)
	want := "# late kernel:       rank 2 started last in 2 of 4 recorded rows, at most 24.3 us after the earliest rank (GPU timers aligned to the host clock; beyond an error of at most ±2.5 us); it called the operation at most 24.8 us after the earliest rank's call; other ranks started last in 2 more (the latest rank 0, 613 us after the earliest, its call at most 588 us after)"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
