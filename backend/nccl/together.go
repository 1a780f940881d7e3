package nccl

import (
	"encoding/binary"
	"runtime"
	"sync"
	"time"

	"collbench/internal/hostclock"
)

// Bounds of the margin rank 0 leaves between its deadline and the moment
// it sets it (see startTogether).
const (
	minStartMargin   = 200 * time.Microsecond
	firstStartMargin = 2 * time.Millisecond
	maxStartMargin   = 20 * time.Millisecond
)

// together is what the processes of a distributed world know of their
// starts together: rank 0's margin, and this process's slack at the last
// start (how long before the deadline it heard of it; negative: late).
type together struct {
	mu     sync.Mutex
	margin time.Duration
	slack  time.Duration
	timed  bool // slack was measured (this process shares rank 0's clock)
}

// StartTogether returns on every rank at one instant of the host's clock,
// as near as the host can: a barrier releases its processes one network
// delay apart (a tree over TCP: 45-347 µs on 4 GPUs of one host), and the
// recorded operation issued after it would show the last released as a
// late kernel. In one process it is the spinning barrier.
func (r *rank) StartTogether() error { return r.w.startTogether() }

// startTogether: every process first tells rank 0 (a gather, no reply)
// how early it heard of the last deadline; rank 0 then sets the deadline,
// its host clock now plus a margin twice the latest release it saw, and
// every process gets it (an all-gather that only rank 0 fills, so each
// receives as little as a barrier's). The processes on rank 0's host (its
// boot id) wait for the deadline; the others have no common clock with it
// and go at once, as after a barrier. No wait exceeds maxStartMargin.
func (w *world) startTogether() error {
	if w.ctl == nil {
		return w.bar.Wait()
	}
	t := w.together
	t.mu.Lock()
	defer t.mu.Unlock()
	var mine []byte
	if t.timed {
		mine = binary.LittleEndian.AppendUint64(nil, uint64(t.slack.Nanoseconds())) //nolint:gosec // G115: a duration's bits, read back as one
	}
	heard, err := w.ctl.Gather(mine)
	if err != nil {
		return err
	}
	var msg []byte
	if w.ctl.Rank() == 0 {
		t.margin = nextMargin(t.margin, heard)
		at := time.Now().Add(t.margin).UnixNano()
		msg = binary.LittleEndian.AppendUint64(nil, uint64(at)) //nolint:gosec // G115: a time after 1970
		msg = append(msg, hostclock.ID()...)
	}
	all, err := w.ctl.AllGather(msg)
	if err != nil {
		return err
	}
	t.timed = false
	root := all[0]
	if len(root) < 8 || string(root[8:]) != hostclock.ID() {
		return nil
	}
	at := time.Unix(0, int64(binary.LittleEndian.Uint64(root))) //nolint:gosec // G115: rank 0's time, written above
	t.slack, t.timed = time.Until(at), true
	if t.slack > maxStartMargin {
		return nil // the clock moved: no wait beyond the bound
	}
	// Waited for on the monotonic clock: a step of the wall clock during
	// the wait cannot stretch it.
	waitUntil(time.Now().Add(t.slack))
	return nil
}

// nextMargin is rank 0's next margin: twice the longest release it has
// seen (its last margin less a process's slack), within bounds; the first
// is firstStartMargin.
func nextMargin(last time.Duration, heard [][]byte) time.Duration {
	if last == 0 {
		return firstStartMargin
	}
	release := time.Duration(0)
	for _, h := range heard {
		if len(h) != 8 {
			continue
		}
		slack := time.Duration(int64(binary.LittleEndian.Uint64(h))) //nolint:gosec // G115: written from a duration
		release = max(release, last-slack)
	}
	return min(max(2*release, minStartMargin), maxStartMargin)
}

// sleepSlack is how long before a deadline waitUntil stops sleeping and
// spins: Go's timers on Linux wake up to about a millisecond late (their
// poller waits in whole milliseconds; on a 2-core machine a 300 µs
// time.Sleep returned 0.78-0.86 ms late, a 1.7 ms one 0.47-0.53 ms late),
// and each process rounds its own wait, so processes that slept to one
// deadline woke 20-600 µs apart on 4 GPUs of one host.
const sleepSlack = 2 * time.Millisecond

// waitClock is what a wait reads the time with, sleeps and yields with:
// the process's own (hostWait), or a model in a test.
type waitClock struct {
	now   func() time.Time
	sleep func(time.Duration)
	yield func()
}

// hostWait is the process's own clock, timers and scheduler.
var hostWait = waitClock{now: time.Now, sleep: time.Sleep, yield: runtime.Gosched}

// waitUntil waits for at on the process's own clock (waitClock.until).
func waitUntil(at time.Time) { hostWait.until(at) }

// until sleeps until sleepSlack before at, then spins to it.
func (c waitClock) until(at time.Time) {
	for {
		d := at.Sub(c.now()) - sleepSlack
		if d <= 0 {
			break
		}
		c.sleep(d)
	}
	for c.now().Before(at) {
		c.yield()
	}
}
