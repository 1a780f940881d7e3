package suites

import (
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
