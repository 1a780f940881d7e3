package syncx

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestBarrierReusable(t *testing.T) {
	const n, rounds = 5, 200
	b := NewBarrier(n)
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

func TestBarrierAbortWakesWaiters(t *testing.T) {
	b := NewBarrier(3)
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
