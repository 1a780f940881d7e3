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
