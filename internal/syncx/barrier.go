// Package syncx holds synchronisation helpers shared by the backends.
package syncx

import (
	"errors"
	"fmt"
	"sync"
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
