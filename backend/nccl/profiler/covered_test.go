package profiler

import "testing"

// TestCovered: steps in flight together count once on the wire.
func TestCovered(t *testing.T) {
	for _, tc := range []struct {
		name string
		iv   [][2]uint64
		want uint64
	}{
		{"none", nil, 0},
		{"one", [][2]uint64{{10, 30}}, 20},
		{"apart", [][2]uint64{{10, 20}, {30, 45}}, 25},
		{"overlapping, out of order", [][2]uint64{{30, 60}, {10, 40}}, 50},
		{"nested", [][2]uint64{{10, 100}, {20, 30}, {40, 50}}, 90},
		{"touching", [][2]uint64{{10, 20}, {20, 30}}, 20},
		{"eight in flight", [][2]uint64{{0, 80}, {10, 90}, {20, 100}, {30, 110}, {40, 120}, {50, 130}, {60, 140}, {70, 150}}, 150},
	} {
		if got := covered(tc.iv); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
