package nccl

import (
	"testing"

	"collbench/dtype"
	"collbench/measure"
)

// TestEachLoopStartsAtTheBuffersStart follows a row as the runner issues
// it: the warm-up, the aligning operation, then the timed loop in two
// steps. As in NCCL's benchmark, the warm-up and the timed loop each start
// at place 0, a loop issued in steps goes on where its last step ended,
// and the aligning operation (no rotation) moves nothing.
func TestEachLoopStartsAtTheBuffersStart(t *testing.T) {
	const mib = 1 << 20
	send, recv := &devBuf{ptr: 1 << 40, n: 64 * mib}, &devBuf{ptr: 2 << 40, n: 64 * mib}
	r := &rank{size: 2}
	call := measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Count: mib / 4,
		Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}}
	step := func(rot measure.Rotation, n int) (int, int) {
		c := call
		c.Rotate = rot
		got := r.rotation(c, n)
		return got.First, got.Steps
	}
	for _, s := range []struct {
		what        string
		rot         measure.Rotation
		n           int
		first, ways int
	}{
		{"warm-up", measure.RotateWarmup, 5, 0, 64},
		{"aligning operation", measure.NoRotation, 1, 0, 0},
		{"timed loop", measure.RotateTimed, 20, 0, 64},
		{"timed loop, second step", measure.RotateTimed, 20, 20, 64},
		{"timed loop, third step (wraps)", measure.RotateTimed, 30, 40, 64},
		{"next warm-up of the same row", measure.RotateWarmup, 5, 0, 64},
	} {
		if first, ways := step(s.rot, s.n); first != s.first || ways != s.ways {
			t.Errorf("%s: starts at place %d of %d, want %d of %d", s.what, first, ways, s.first, s.ways)
		}
	}
	if first, _ := step(measure.RotateWarmup, 5); first != 5 {
		t.Errorf("a warm-up issued in two steps: the second starts at place %d, want 5", first)
	}
}
