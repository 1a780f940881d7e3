package measure

import (
	"testing"

	"collbench/dtype"
)

// TestWarmTargetMovesData: the world's warm-up runs at the first row that
// moves data in every group, not at a first row the library discards.
func TestWarmTargetMovesData(t *testing.T) {
	f32 := dtype.Float32
	ag := Case{Coll: AllGather, DType: f32}
	ar := Case{Coll: AllReduce, DType: f32, Op: Sum}
	four := [][]int{{0, 1, 2, 3}}
	for _, tc := range []struct {
		name   string
		cases  []Case
		sizes  []int64
		groups [][]int
		want   Case
		size   int64
		ok     bool
	}{
		{"first row moves data", []Case{ar}, []int64{8, 1024}, four, ar, 8, true},
		{"allgather of 8 B on 4 ranks is empty", []Case{ag}, []int64{8, 64, 1024}, four, ag, 64, true},
		{"an empty first case gives way to the next", []Case{ag, ar}, []int64{8}, four, ar, 8, true},
		{"every group must move data", []Case{ag}, []int64{8, 16}, [][]int{{0, 1}, {2, 3, 4, 5}}, ag, 16, true},
		{"nothing moves", []Case{ag}, []int64{8}, four, Case{}, 0, false},
		{"no groups", []Case{ar}, []int64{8}, nil, Case{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, size, ok := warmTarget(tc.cases, tc.sizes, tc.groups)
			if ok != tc.ok || c != tc.want || size != tc.size {
				t.Errorf("got %v %v at %d bytes, want %v %v at %d", ok, c.Coll, size, tc.ok, tc.want.Coll, tc.size)
			}
		})
	}
}
