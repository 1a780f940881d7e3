package measure

import (
	"fmt"
	"time"

	"collbench/results"
	"collbench/watchdog"
)

// align starts every rank's clock together: a barrier, then one untimed
// operation, whose completion is near-simultaneous on every rank (a
// barrier across processes releases its ranks a network delay apart).
func align(r Rank, tr *watchdog.Tracker, what string, iters int, call Call) error {
	tr.SetPhase(watchdog.Barrier)
	if err := r.Barrier(); err != nil {
		return err
	}
	tr.Begin(what, watchdog.Timed, iters)
	tr.Op(0)
	// At the buffers' start, as NCCL's benchmark's aligning operation;
	// the timed loop then starts there too.
	call.Rotate = NoRotation
	if err := r.Launch(call); err != nil {
		return err
	}
	return r.Sync()
}

// issue issues call n times back to back, in one step where the rank is
// a Repeater, and records the operations on tr.
func issue(r Rank, tr *watchdog.Tracker, call Call, n int) error {
	if n <= 0 {
		return nil
	}
	if rep, ok := r.(Repeater); ok {
		tr.Op(1)
		if err := rep.Repeat(call, n); err != nil {
			return err
		}
		tr.Ops(n-1, n)
		return nil
	}
	for k := 0; k < n; k++ {
		tr.Op(k + 1)
		if err := r.Launch(call); err != nil {
			return err
		}
	}
	return nil
}

// timeLoop issues p.Iters iterations back to back, each p.Agg operations
// as one group where the rank can group them, synchronising after each as
// p.Blocking says; it returns the wall time of one operation after the
// stream has drained, and the host time spent issuing one, in µs.
func timeLoop(r Rank, tr *watchdog.Tracker, what string, call Call, p Plan, now func() time.Time) (wall, cpu float64, err error) {
	now = clockOf(r, now)
	if err := align(r, tr, what, p.Iters, call); err != nil {
		return 0, 0, err
	}
	agg := max(p.Agg, 1)
	_, repeats := r.(Repeater)
	gl, grouped := r.(GroupLauncher)
	var busy time.Duration // blocking 3: the time outside the barriers
	var ts time.Time
	t0 := now()
	loop := p.Iters // the iterations issued one by one
	if repeats && agg == 1 && p.Blocking == 0 {
		// Nothing happens between the operations: issue them in one step.
		if err := issue(r, tr, call, p.Iters); err != nil {
			return 0, 0, err
		}
		loop = 0
	}
	for k := 0; k < loop; k++ {
		tr.Op(k + 1)
		if p.Blocking == 3 {
			ts = now()
		}
		switch {
		case agg > 1 && grouped:
			err = gl.LaunchGroup(call, agg)
		default:
			for j := 0; j < agg && err == nil; j++ {
				err = r.Launch(call)
			}
		}
		if err == nil && p.Blocking > 0 {
			err = r.Sync()
		}
		if p.Blocking == 3 {
			busy += now().Sub(ts)
		}
		if err == nil && (p.Blocking == 1 || p.Blocking == 3) {
			tr.SetPhase(watchdog.Barrier)
			err = r.Barrier()
			tr.SetPhase(watchdog.Timed)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	issued := now().Sub(t0)
	if err := r.Sync(); err != nil {
		return 0, 0, err
	}
	total := now().Sub(t0)
	if p.Blocking == 3 {
		total, issued = busy, busy
	}
	ops := float64(p.Iters * agg)
	return float64(total.Nanoseconds()) / 1e3 / ops, float64(issued.Nanoseconds()) / 1e3 / ops, nil
}

// timeGraph captures iters operations into a graph once, replays it
// replays times and returns the time of one operation, in µs.
func timeGraph(r Rank, tr *watchdog.Tracker, what string, call Call, iters, replays int, now func() time.Time) (float64, error) {
	now = clockOf(r, now)
	gc, ok := r.(GraphCapturer)
	if !ok {
		return 0, fmt.Errorf("%w: this backend has no CUDA graphs", ErrUnsupported)
	}
	g, err := gc.Capture(call, iters)
	if err != nil {
		return 0, err
	}
	defer g.Destroy()
	// One untimed replay loads the graph onto the device.
	if err := g.Replay(); err != nil {
		return 0, err
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	tr.SetPhase(watchdog.Barrier)
	if err := r.Barrier(); err != nil {
		return 0, err
	}
	tr.Begin(what+" (CUDA graph)", watchdog.Timed, replays)
	if err := g.Replay(); err != nil {
		return 0, err
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	t0 := now()
	for k := 0; k < replays; k++ {
		tr.Op(k + 1)
		if err := g.Replay(); err != nil {
			return 0, err
		}
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	return float64(now().Sub(t0).Nanoseconds()) / 1e3 / float64(iters*replays), nil
}

// iterStats averages each iteration over ranks and summarises the result.
func iterStats(samples [][]float64) *results.IterStats {
	if len(samples) == 0 || len(samples[0]) == 0 {
		return nil
	}
	per := make([]float64, len(samples[0]))
	for _, s := range samples {
		for k := range per {
			if k < len(s) {
				per[k] += s[k] / float64(len(samples))
			}
		}
	}
	return results.NewIterStats(per)
}

// clockOf is the clock a loop on r is timed by: the rank's modeled clock
// where it has one (VirtualClock), else now.
func clockOf(r Rank, now func() time.Time) func() time.Time {
	if vc, ok := r.(VirtualClock); ok {
		if c := vc.Clock(); c != nil {
			return c
		}
	}
	return now
}
