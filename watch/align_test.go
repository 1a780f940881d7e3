package watch

import (
	"math"
	"testing"
)

// TestAlignerPlacesKernelsOnTheHostClock: a GPU whose timer runs 80 ms
// behind the host's; each operation's bounds narrow the offset until the
// kernel's start is placed within the error of its true host time, a
// drifted timer starts the bounds again, and an operation with no channel
// reported bounds nothing.
func TestAlignerPlacesKernelsOnTheHostClock(t *testing.T) {
	const skew = int64(80_000_000) // host = GPU + skew
	var a Aligner
	// issue at host time h; the kernel starts lag ns later on the host's
	// clock and runs for dur; the proxy sees the start seenLag after it.
	op := func(h, lag, dur, seenLag, skew int64) KernelOp {
		g := h + lag - skew
		return KernelOp{IssueNS: h, GPUStart: g, GPUStop: g + dur, SeenMinusGPU: (h + lag + seenLag) - g}
	}
	var lastErr int64 = math.MaxInt64
	for i, c := range []struct{ lag, seen int64 }{{40_000, 30_000}, {5_000, 60_000}, {50_000, 2_000}, {8_000, 9_000}} {
		h := int64(1_000_000_000) + int64(i)*1_000_000
		start, end, errNS, ok := a.Place(op(h, c.lag, 20_000, c.seen, skew))
		if !ok {
			t.Fatalf("op %d: not placed", i)
		}
		truth := h + c.lag
		if d := start - truth; d > errNS || d < -errNS {
			t.Errorf("op %d: start %d, truth %d, beyond the error %d", i, start, truth, errNS)
		}
		if end-start != 20_000 {
			t.Errorf("op %d: kernel of %d ns, want 20000", i, end-start)
		}
		if errNS > lastErr {
			t.Errorf("op %d: error grew from %d to %d", i, lastErr, errNS)
		}
		lastErr = errNS
	}
	if lastErr > 5_000 {
		t.Errorf("after four operations the error is %d ns, want it narrowed below 5 us", lastErr)
	}
	// The timer jumps by 1 s: the old bounds cannot hold it, new ones start.
	h := int64(2_000_000_000)
	start, _, _, ok := a.Place(op(h, 10_000, 20_000, 10_000, skew+1_000_000_000))
	if !ok || start < h || start > h+20_000 {
		t.Errorf("after a jump of the timer: start %d (ok %v), want within [%d, %d]", start, ok, h, h+20_000)
	}
	if _, _, _, ok := a.Place(KernelOp{IssueNS: h, SeenMinusGPU: math.MaxInt64}); ok {
		t.Error("an operation with no channel reported was placed")
	}
}
