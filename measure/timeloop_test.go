package measure

import (
	"errors"
	"testing"
	"time"

	"collbench/dtype"
	"collbench/results"
	"collbench/watchdog"
)

// idleRank does nothing, so that only the timed loop's own work is seen.
type idleRank struct{ launches int }

func (r *idleRank) Rank() int                              { return 0 }
func (r *idleRank) Size() int                              { return 2 }
func (r *idleRank) WorldRank() int                         { return 0 }
func (r *idleRank) Device() results.Device                 { return results.Device{} }
func (r *idleRank) Alloc(int64) (Buffer, error)            { return nil, nil }
func (r *idleRank) Free(Buffer) error                      { return nil }
func (r *idleRank) Fill(View, int64, Pattern) error        { return nil }
func (r *idleRank) Poison(View, int64, dtype.DType) error  { return nil }
func (r *idleRank) Check(View, Expectation) (int64, error) { return 0, nil }
func (r *idleRank) Launch(Call) error                      { r.launches++; return nil }
func (r *idleRank) Sync() error                            { return nil }
func (r *idleRank) Barrier() error                         { return nil }

// TestTimeLoopAllocatesNothingPerOperation: the timed loop allocates no
// memory per operation, in any blocking mode, so the Go collector has no
// reason to run, or to make the issuing thread help it, while small
// messages are timed.
func TestTimeLoopAllocatesNothingPerOperation(t *testing.T) {
	tr := watchdog.NewTracker(0)
	call := Call{Coll: AllReduce, DType: dtype.Float32, Op: Sum, Count: 2}
	for _, blocking := range []int{0, 1, 2, 3} {
		r := &idleRank{}
		per := func(iters int) float64 {
			p := Plan{Iters: iters, Agg: 1, Blocking: blocking}
			return testing.AllocsPerRun(20, func() {
				if _, _, err := timeLoop(r, tr, "allreduce", call, p, time.Now); err != nil {
					t.Fatal(err)
				}
			})
		}
		few, many := per(1), per(1000)
		if many > few {
			t.Errorf("blocking %d: %v allocations for 1 operation, %v for 1000", blocking, few, many)
		}
		if r.launches == 0 {
			t.Errorf("blocking %d: nothing was launched", blocking)
		}
	}
}

// repeatRank is an idleRank that issues loops in one step, as the NCCL
// backend does; failAt makes the repeat fail.
type repeatRank struct {
	idleRank
	repeats []int
	fail    error
}

func (r *repeatRank) Repeat(_ Call, n int) error {
	r.repeats = append(r.repeats, n)
	return r.fail
}

// TestTimeLoopRepeatsInOneStep: where the rank can issue a loop in one
// step and nothing has to happen between operations (blocking 0, one
// operation per iteration), the timed loop hands it the whole loop; the
// progress record still counts every operation. Blocking modes and -m
// aggregation keep issuing one by one.
func TestTimeLoopRepeatsInOneStep(t *testing.T) {
	call := Call{Coll: AllReduce, DType: dtype.Float32, Op: Sum, Count: 2}
	cases := []struct {
		name          string
		plan          Plan
		repeats       []int
		launches      int // the aligning launch is always one by one
		ops, lastIter int64
	}{
		{name: "blocking 0", plan: Plan{Iters: 50, Agg: 1}, repeats: []int{50}, launches: 1, ops: 51, lastIter: 50},
		{name: "blocking 1", plan: Plan{Iters: 50, Agg: 1, Blocking: 1}, launches: 51, ops: 51, lastIter: 50},
		{name: "aggregated", plan: Plan{Iters: 10, Agg: 4}, launches: 41, ops: 11, lastIter: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &repeatRank{}
			tr := watchdog.NewTracker(0)
			if _, _, err := timeLoop(r, tr, "allreduce", call, tc.plan, time.Now); err != nil {
				t.Fatal(err)
			}
			if len(r.repeats) != len(tc.repeats) || (len(tc.repeats) > 0 && r.repeats[0] != tc.repeats[0]) {
				t.Errorf("repeats %v, want %v", r.repeats, tc.repeats)
			}
			if r.launches != tc.launches {
				t.Errorf("%d single launches, want %d", r.launches, tc.launches)
			}
			rec := tr.Snapshot(time.Now())
			if rec.Ops != tc.ops || int64(rec.Iter) != tc.lastIter {
				t.Errorf("progress record: %d operations, iteration %d; want %d, %d", rec.Ops, rec.Iter, tc.ops, tc.lastIter)
			}
		})
	}
}

// TestTimeLoopRepeatFailureIsReturned: a failed repeat ends the loop with
// its error, and nothing is timed.
func TestTimeLoopRepeatFailureIsReturned(t *testing.T) {
	want := errors.New("ncclAllReduce: unhandled cuda error (after 7 of 50 operations issued)")
	r := &repeatRank{fail: want}
	call := Call{Coll: AllReduce, DType: dtype.Float32, Op: Sum, Count: 2}
	_, _, err := timeLoop(r, watchdog.NewTracker(0), "allreduce", call, Plan{Iters: 50, Agg: 1}, time.Now)
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}
