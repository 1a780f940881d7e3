package fakegpu

import (
	"sync"
	"time"

	"collbench/cuda"
)

// stream runs its work in order on its own goroutine, as a GPU stream
// does; the first error sticks, as a faulted CUDA context's does.
type stream struct {
	d   *Driver
	dev int

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []func() error
	busy      bool
	err       error
	capturing bool
	captured  []func() error
	stopped   bool
	// vt is the stream's virtual time under a Model: the end of the work
	// it ran. Only the stream's own goroutine reads or writes it.
	vt float64 // seconds
}

// advance moves the stream's virtual time on by the work's duration, in
// its GPU's own slices where the model shares the GPU (under a Model;
// nothing without one).
func (s *stream) advance(d float64) {
	if s.d.clk == nil {
		s.vt += d
		return
	}
	s.vt = s.d.clk.busy(s.dev, s.vt, d)
}

func newStream(d *Driver, dev int) *stream {
	s := &stream{d: d, dev: dev}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

func (s *stream) run() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.queue) == 0 && !s.stopped {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			return
		}
		op := s.queue[0]
		s.queue = s.queue[1:]
		s.busy = true
		s.mu.Unlock()
		err := op()
		s.mu.Lock()
		s.busy = false
		if err != nil && s.err == nil {
			s.err = err
		}
		s.cond.Broadcast()
	}
}

// enqueue adds op to the stream's work, or to the graph being captured.
func (s *stream) enqueue(op func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capturing {
		s.captured = append(s.captured, op)
		return nil
	}
	s.queue = append(s.queue, op)
	s.cond.Broadcast()
	return nil
}

// wait blocks until the stream's work is done, within the machine's
// timeout, and returns its first error.
func (s *stream) wait() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capturing {
		return cudaErr("cuStreamSynchronize", 900)
	}
	expired := false
	// Twice the machine's timeout: a wait inside the work (a collective,
	// a receive) runs out first and says who it waited for.
	t := time.AfterFunc(2*s.d.opts.Timeout, func() {
		s.mu.Lock()
		expired = true
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer t.Stop()
	for (len(s.queue) > 0 || s.busy) && !expired {
		s.cond.Wait()
	}
	if expired {
		return cudaErrf("cuStreamSynchronize", 999, "the stream's work did not finish within %v", 2*s.d.opts.Timeout)
	}
	return s.err
}

func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *stream) beginCapture() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capturing {
		return cudaErr("cuStreamBeginCapture", 900)
	}
	s.capturing, s.captured = true, nil
	return nil
}

func (s *stream) endCapture() ([]func() error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.capturing {
		return nil, cudaErrf("cuStreamEndCapture", 1, "the stream is not capturing")
	}
	ops := s.captured
	s.capturing, s.captured = false, nil
	return ops, nil
}

// StreamTime waits for the stream's work and returns its virtual time, as
// a time from the Unix epoch (driver.VirtualClock); false without a Model.
func (d *Driver) StreamTime(h cuda.Stream) (time.Time, bool) {
	if d.clk == nil {
		return time.Time{}, false
	}
	s, err := d.streamOf("StreamTime", h)
	if err != nil || s.wait() != nil {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Unix(0, 0).Add(time.Duration(s.vt * 1e9)), true
}
