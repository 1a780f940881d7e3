package cli

import (
	"math"
	"strings"
	"testing"
	"time"

	"collbench/measure"
)

// TestTimeLeftFollowsSizes: in a doubling sweep whose rows take 1 ms plus
// 1 ns per byte, after the first ten rows the estimate of the ten rows
// left is within 1% of their real time, where counting rows would be off
// by a factor of about 60.
func TestTimeLeftFollowsSizes(t *testing.T) {
	cost := func(size int64) time.Duration { return time.Millisecond + time.Duration(size) }
	var c rowCost
	if _, ok := c.left(1, 1); ok {
		t.Fatal("an estimate before any row finished")
	}
	var doneTime time.Duration
	for i := 0; i < 10; i++ {
		size := int64(1024) << i
		c.add(size, cost(size))
		doneTime += cost(size)
	}
	var bytesLeft int64
	var truth time.Duration
	for i := 10; i < 20; i++ {
		size := int64(1024) << i
		bytesLeft += size
		truth += cost(size)
	}
	got, ok := c.left(10, bytesLeft)
	if !ok || math.Abs(got.Seconds()-truth.Seconds()) > 0.01*truth.Seconds() {
		t.Fatalf("time left %v, truth %v", got, truth)
	}
	if byCount := doneTime; truth < 50*byCount {
		t.Fatalf("the case does not separate the models: %v vs %v", truth, byCount)
	}
}

// TestTimeLeftCountsDown feeds rows of one size whose times alternate
// between 1 and 3 ms, as noisy rows do: the raw estimate of the finishing
// time jumps back and forth with each row; the one shown moves far less.
func TestTimeLeftCountsDown(t *testing.T) {
	p := &progress{}
	var c rowCost
	now := time.Unix(0, 0)
	var rawPrev, shownPrev time.Time
	var rawJump, shownJump time.Duration
	for i := 0; i < 40; i++ {
		took := time.Millisecond
		if i%2 == 1 {
			took = 3 * time.Millisecond
		}
		now = now.Add(took)
		c.add(1024, took)
		left, _ := c.left(100-i, int64(100-i)*1024)
		shown := p.smooth(now, left)
		raw, disp := now.Add(left), now.Add(shown)
		if i > 15 {
			rawJump = max(rawJump, absDur(raw.Sub(rawPrev)))
			shownJump = max(shownJump, absDur(disp.Sub(shownPrev)))
		}
		rawPrev, shownPrev = raw, disp
	}
	if shownJump*2 > rawJump {
		t.Fatalf("the finishing time shown moves by up to %v, the raw estimate by %v: not smoothed", shownJump, rawJump)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestProgressDrawsOnATerminal(t *testing.T) {
	ev := measure.Progress{Done: 5, Total: 20, Case: measure.Case{Coll: measure.AllGather, DType: 7, Op: measure.NoOp}, Size: 64 << 20}
	io, _, errOut := TestIO()
	io.ErrTTY = true
	p := newProgress(io)
	p.update(ev)
	p.done()
	if !strings.Contains(errOut.String(), "6/20 allgather") {
		t.Fatalf("terminal progress missing: %q", errOut)
	}
	io.ErrTTY = false
	errOut.Reset()
	p = newProgress(io)
	p.update(ev)
	if errOut.Len() != 0 {
		t.Fatal("progress printed without a terminal")
	}
	io.ErrTTY, p.quiet = true, true
	p.update(ev)
	if errOut.Len() != 0 {
		t.Fatal("progress printed with --quiet")
	}
}
