package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"collbench/backend/nccl/fakegpu"
	"collbench/dtype"
	"collbench/internal/memcontrol"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// TestDistributedWorldsOnTheFakeMachine opens one rank per "process" on a
// fake 4-GPU machine (OpenDistributed, as under launch or mpirun), runs a
// verified sweep of the worlds' rows and closes every world. The "processes"
// share this test's one profiler plugin, whose recordings are one at a
// time, so the recorder is off: (the stall of NCCL's profiler is played in
// one process, TestFakeGPUProfilerStallNeverHoldsTheRun).
func TestDistributedWorldsOnTheFakeMachine(t *testing.T) {
	t.Setenv("COLLBENCH_NCCL_PROFILER", "off")
	for _, stall := range []int64{-1} {
		d := fakegpu.HGX("H100", 4, fakegpu.Options{Timeout: time.Minute, ProfilerStall: stall})
		ctls := memcontrol.New(4, nil)
		var mu sync.Mutex
		var rows []results.Row
		var notes []string
		start := time.Now()
		errs := eachProcess(d, ctls, func(ctx context.Context, r int, b *Backend, w measure.World) error {
			p := measure.Plan{Collectives: []measure.Collective{measure.AllToAll, measure.AllReduce}, DTypes: []dtype.DType{dtype.Float32},
				Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{1024, 64 << 10}, Iters: 2, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{0}}
			cases, err := p.Cases(b, 4)
			if err != nil {
				return err
			}
			rn := &measure.Runner{World: w, Plan: p, Cases: cases}
			rn.OnNote = func(s string) {
				mu.Lock()
				notes = append(notes, s)
				mu.Unlock()
			}
			got, err := rn.Run(ctx)
			if r == 0 {
				mu.Lock()
				rows = got
				mu.Unlock()
			}
			return err
		})
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("stall %d: took %v: a close waited for the stuck proxy", stall, took)
		}
		for r, err := range errs {
			if err != nil {
				t.Errorf("stall %d: rank %d: %v", stall, r, err)
			}
		}
		if len(rows) != 4 {
			t.Fatalf("stall %d: %d rows, want 4", stall, len(rows))
		}
		for _, row := range rows {
			if w := row.OutOfPlace.Wrong; w == nil || *w != 0 {
				t.Errorf("stall %d: %s %d B not verified", stall, row.Collective, row.SizeBytes)
			}
		}
		if strings.Contains(strings.Join(notes, "\n"), wedgedNote) {
			t.Errorf("noted a stuck proxy: %q", notes)
		}
	}
}

// TestCloseIsBoundedWhatever NCCL holds: a destroy that never returns, an
// abort that never returns (the world's Abort itself returns at once), and
// a rank whose thread is still inside a call that never returns: Close
// comes back within its bound and names the GPU whose communicator NCCL
// would not release, and only that one.
func TestCloseIsBoundedWhateverNCCLHolds(t *testing.T) {
	saved := closeBound
	closeBound = 500 * time.Millisecond
	t.Cleanup(func() { closeBound = saved })
	for _, c := range []struct {
		name   string
		faults []fakegpu.Fault
		abort  bool // abort the world first
		stuck  string
	}{
		{"destroy", []fakegpu.Fault{{Call: "ncclCommDestroy", Device: 2, Hang: true}}, false, "rank 2 "},
		{"abort", []fakegpu.Fault{{Call: "ncclCommAbort", Device: 1, Hang: true}}, true, "rank 1 "},
		{"a call and its abort", []fakegpu.Fault{{Call: "ncclAllReduce", Device: 3, Hang: true}, {Call: "ncclCommAbort", Device: 3, Hang: true}}, true, "rank 3 "},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openFake(t, 4, fakegpu.Options{Timeout: time.Minute, Faults: c.faults})
			w, err := b.Open(context.Background(), 4)
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "a call and its abort" {
				// Rank 3's thread stays inside ncclAllReduce for good.
				go func() { _ = w.Run(func(r measure.Rank) error { return r.Launch(allreduceCall(r)) }) }()
				time.Sleep(100 * time.Millisecond)
			}
			if c.abort {
				start := time.Now()
				w.(measure.Aborter).Abort(errors.New("planted"))
				// An Abort that waited for the hung ncclCommAbort would
				// take the fake's minute.
				if took := time.Since(start); took > time.Second {
					t.Errorf("Abort took %v: it waited for ncclCommAbort", took)
				}
			}
			start := time.Now()
			err = w.Close()
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Close took %v, bound %v", took, closeBound)
			}
			var sc *StuckCloseError
			if !errors.As(err, &sc) || len(sc.Ranks) != 1 || !strings.HasPrefix(sc.Ranks[0], c.stuck) {
				t.Errorf("Close: %v; want only %q named", err, c.stuck)
			}
		})
	}
}

// allreduceCall is a small allreduce on buffers of its own, for r.
func allreduceCall(r measure.Rank) measure.Call {
	send, _ := r.Alloc(1024)
	recv, _ := r.Alloc(1024)
	return measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Count: 256, Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}}
}

// TestStartTogetherOutrunsTheBarriersStagger: processes that a barrier
// lets go one network delay apart (a tree's leaves after its root; here
// 3 ms a rank) leave StartTogether at one instant of the host's clock, so
// the operation recorded after it shows no rank late. Barrier, on the
// same model, keeps the stagger: the model is what the GPUs showed under
// launch -n 4 (45-347 µs late rows).
func TestStartTogetherOutrunsTheBarriersStagger(t *testing.T) {
	t.Setenv("COLLBENCH_NCCL_PROFILER", "off")
	const n = 4
	step := 3 * time.Millisecond
	d := fakegpu.HGX("H100", n, fakegpu.Options{Timeout: time.Minute})
	ctls := memcontrol.New(n, nil)
	memcontrol.Stagger(ctls, func(r int) time.Duration { return time.Duration(r) * step })
	// A barrier, then StartTogether 6 times: its first margin is a guess,
	// and a loaded test machine may hold a goroutine a few ms on any one
	// call, so the best of the others is judged.
	const rounds = 7
	left := make([][rounds]time.Time, n)
	errs := eachProcess(d, ctls, func(_ context.Context, r int, _ *Backend, w measure.World) error {
		rk := w.Ranks()[0]
		for k := range rounds {
			var err error
			if k == 0 {
				err = rk.Barrier()
			} else {
				err = rk.(measure.TogetherStarter).StartTogether()
			}
			left[r][k] = time.Now()
			if err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	spread := func(k int) time.Duration {
		lo, hi := left[0][k], left[0][k]
		for r := range left {
			lo, hi = minTime(lo, left[r][k]), maxTime(hi, left[r][k])
		}
		return hi.Sub(lo)
	}
	if s := spread(0); s < 2*step {
		t.Errorf("the barrier let its processes go %v apart; the model staggers them by %v", s, (n-1)*step)
	}
	best := spread(2)
	for k := 3; k < rounds; k++ {
		best = min(best, spread(k))
	}
	if best > step {
		t.Errorf("StartTogether let its processes go %v apart at best (the barrier's stagger: %v)", best, (n-1)*step)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestNextMargin: rank 0's margin is twice the longest release it heard
// of, within its bounds; processes that did not time theirs say nothing.
func TestNextMargin(t *testing.T) {
	slack := func(d time.Duration) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(d.Nanoseconds())) } //nolint:gosec // G115: a duration's bits, as startTogether writes them
	for _, c := range []struct {
		name  string
		last  time.Duration
		heard [][]byte
		want  time.Duration
	}{
		{"first", 0, nil, firstStartMargin},
		{"all early", 2 * time.Millisecond, [][]byte{nil, slack(1800 * time.Microsecond), slack(1500 * time.Microsecond)}, time.Millisecond},
		{"one late", 2 * time.Millisecond, [][]byte{nil, slack(time.Millisecond), slack(-3 * time.Millisecond)}, 10 * time.Millisecond},
		{"at least the floor", time.Millisecond, [][]byte{nil, slack(990 * time.Microsecond)}, minStartMargin},
		{"at most the cap", time.Millisecond, [][]byte{nil, slack(-time.Second)}, maxStartMargin},
		{"none timed", time.Millisecond, [][]byte{nil, nil, {1, 2}}, minStartMargin},
	} {
		if got := nextMargin(c.last, c.heard); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// eachProcess opens one distributed world per member of ctls on the fake
// machine d, as processes under launch would, runs fn on each in a
// goroutine of its own and closes it; it returns each one's error.
func eachProcess(d *fakegpu.Driver, ctls []*memcontrol.Control, fn func(ctx context.Context, r int, b *Backend, w measure.World) error) []error {
	errs := make([]error, len(ctls))
	var wg sync.WaitGroup
	for r := range ctls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Open(Options{Driver: d})
			if err != nil {
				errs[r] = err
				return
			}
			ctx := watchdog.WithBoard(context.Background(), watchdog.NewBoard())
			w, err := b.OpenDistributed(ctx, ctls[r], r)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = errors.Join(fn(ctx, r, b, w), w.Close())
		}()
	}
	wg.Wait()
	return errs
}

// TestWaitUntilMeetsItsDeadline: a wait returns at its deadline, not a
// timer's rounding after it. Sleeping until 300 µs before it woke processes
// 20-600 µs apart on 4 GPUs of one host (each process's timer rounds to
// whole milliseconds on its own), which the recorded rows showed as late
// kernels. On a model clock whose sleeps overshoot by up to 1.9 ms (Go's
// timers wake up to about a millisecond late) and whose yields take 1 µs,
// every wait returns within one yield of its deadline, at distances below
// and beyond the slack it spins; the old wait, with the same timers,
// returned as late as they overshot. How late the host's own waits return
// is measured by BenchmarkWaitUntilLateness (a 2-core machine: within 200
// µs quiet, 452 µs at best of 5 beside two busy loops and a race run,
// where the spinning thread loses its core).
func TestWaitUntilMeetsItsDeadline(t *testing.T) {
	for _, over := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 1900 * time.Microsecond} {
		for _, d := range []time.Duration{0, 400 * time.Microsecond, 1300 * time.Microsecond, 2500 * time.Microsecond, 20 * time.Millisecond} {
			c, now, sleeps := modelClock(over)
			at := now().Add(d)
			c.until(at)
			if late := now().Sub(at); late < 0 || late > time.Microsecond {
				t.Errorf("timers %v late, a wait of %v: returned %v after its deadline, want within one yield (1µs)", over, d, late)
			}
			if d > sleepSlack && *sleeps == 0 {
				t.Errorf("a wait of %v spun all the way: it should sleep until %v before its deadline", d, sleepSlack)
			}
			old, oldNow, _ := modelClock(over)
			oldAt := oldNow().Add(d)
			for r := oldAt.Sub(oldNow()) - 300*time.Microsecond; r > 0; r = oldAt.Sub(oldNow()) - 300*time.Microsecond {
				old.sleep(r)
			}
			if late := oldNow().Sub(oldAt); d > 300*time.Microsecond && over > 300*time.Microsecond && late <= time.Microsecond {
				t.Errorf("timers %v late, a wait of %v: the old wait returned %v after its deadline; the model does not overshoot", over, d, late)
			}
		}
	}
}

// modelClock is a waitClock on a clock of its own: a sleep takes what it
// was asked plus over, a yield 1 µs. It returns the clock's now and how
// many sleeps it took.
func modelClock(over time.Duration) (waitClock, func() time.Time, *int) {
	t := time.Unix(1_000_000, 0)
	sleeps := 0
	now := func() time.Time { return t }
	return waitClock{
		now:   now,
		sleep: func(d time.Duration) { sleeps++; t = t.Add(d + over) },
		yield: func() { t = t.Add(time.Microsecond) },
	}, now, &sleeps
}

// BenchmarkWaitUntilLateness measures how late the host's own waits
// return, at distances below and beyond the slack they spin
// (late-µs/op; make bench).
func BenchmarkWaitUntilLateness(b *testing.B) {
	for _, d := range []time.Duration{400 * time.Microsecond, 1300 * time.Microsecond, 2500 * time.Microsecond} {
		b.Run(d.String(), func(b *testing.B) {
			var late time.Duration
			for range b.N {
				at := time.Now().Add(d)
				waitUntil(at)
				late += time.Since(at)
			}
			b.ReportMetric(float64(late.Microseconds())/float64(b.N), "late-µs/op")
		})
	}
}
