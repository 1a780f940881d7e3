package syncx

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

type waiter interface{ Wait() error }

func TestBarrierReusable(t *testing.T) {
	testReusable(t, NewBarrier(5), 5)
	testReusable(t, NewSpinBarrier(3), 3)
}

func testReusable(t *testing.T, b waiter, n int) {
	const rounds = 200
	var counter atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				counter.Add(1)
				if err := b.Wait(); err != nil {
					t.Error(err)
					return
				}
				// After the barrier every party of this round has counted.
				if c := counter.Load(); c < int64((r+1)*n) {
					t.Errorf("round %d: counter %d", r, c)
					return
				}
				if err := b.Wait(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

type abortable interface {
	waiter
	Abort(error)
}

func TestBarrierAbortWakesWaiters(t *testing.T) {
	testAbort(t, NewBarrier(3))
	testAbort(t, NewSpinBarrier(3))
}

func testAbort(t *testing.T, b abortable) {
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- b.Wait() }()
	}
	b.Abort(errors.New("rank 2 failed"))
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, ErrAborted) {
			t.Fatalf("waiter got %v", err)
		}
	}
	if err := b.Wait(); !errors.Is(err, ErrAborted) {
		t.Fatalf("wait after abort: %v", err)
	}
}
