// Package syncx holds synchronisation helpers shared by the backends.
package syncx

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// ErrAborted is returned by Wait once the barrier has been aborted.
var ErrAborted = errors.New("another rank failed; operation abandoned")

// Barrier is a reusable barrier for a fixed number of goroutines that can be
// aborted, waking every waiter with an error.
type Barrier struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	waiting int
	gen     uint64
	err     error
}

// NewBarrier returns a barrier for n parties.
func NewBarrier(n int) *Barrier {
	b := &Barrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Wait blocks until n parties have called it, or the barrier is aborted.
func (b *Barrier) Wait() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	g := b.gen
	b.waiting++
	if b.waiting == b.n {
		b.waiting = 0
		b.gen++
		b.cond.Broadcast()
		return nil
	}
	for g == b.gen && b.err == nil {
		b.cond.Wait()
	}
	if g == b.gen {
		return b.err
	}
	return nil
}

// Abort wakes every waiter with an error wrapping ErrAborted and cause;
// later waits fail at once.
func (b *Barrier) Abort(cause error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = fmt.Errorf("%w (%v)", ErrAborted, cause)
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// SpinBarrier is a barrier whose waiters spin instead of sleeping, so every
// party leaves within microseconds of the last arrival. Use it only where
// each party owns a CPU (one locked thread per GPU). It can be aborted.
type SpinBarrier struct {
	n       int64
	spins   int // spins before a waiter yields
	arrived atomic.Int64
	gen     atomic.Int64
	aborted atomic.Bool
	mu      sync.Mutex
	err     error
}

// NewSpinBarrier returns a spinning barrier for n parties.
// Where the parties cannot each have a CPU (fewer CPUs than parties) its
// waiters yield almost at once: spinning would take the CPU from the party
// everyone waits for.
func NewSpinBarrier(n int) *SpinBarrier {
	spins := spinLimit
	if runtime.NumCPU() <= n {
		spins = 64
	}
	return &SpinBarrier{n: int64(n), spins: spins}
}

// spinLimit is how many spins pass before a waiter starts yielding its
// thread, so a long wait (a slow rank) does not burn a core at full speed.
const spinLimit = 1 << 22

// Wait blocks until n parties have called it, or the barrier is aborted.
func (b *SpinBarrier) Wait() error {
	if b.aborted.Load() {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.err
	}
	g := b.gen.Load()
	if b.arrived.Add(1) == b.n {
		b.arrived.Store(0)
		b.gen.Add(1)
		return nil
	}
	for i := 0; b.gen.Load() == g; i++ {
		if b.aborted.Load() {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.err
		}
		if i > b.spins {
			runtime.Gosched()
		}
	}
	return nil
}

// Abort wakes every waiter with an error wrapping ErrAborted and cause.
func (b *SpinBarrier) Abort(cause error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = fmt.Errorf("%w (%v)", ErrAborted, cause)
	}
	b.mu.Unlock()
	b.aborted.Store(true)
}
