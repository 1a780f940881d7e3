package results

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// LatestOutput writes whole documents to a target from a goroutine of its own,
// the latest one winning: Offer never waits, so a caller that must not
// stall (a collector judging a job's summaries) keeps going while a slow
// disk or a named pipe nobody reads holds the write. A document offered
// while another is being written replaces any that still waits, and the
// ones replaced are counted.
type LatestOutput struct {
	t       *Output
	durable bool

	mu       sync.Mutex
	next     []byte        // the document waiting to be written; nil: none
	done     chan struct{} // closed when the writer goroutine ends; nil: none runs
	replaced int
	err      error // the first write error
}

// NewLatestOutput starts nothing until the first Offer; durable asks each file
// write to reach the disk before it is renamed into place.
func NewLatestOutput(t *Output, durable bool) *LatestOutput {
	return &LatestOutput{t: t, durable: durable}
}

// Offer hands doc (which LatestOutput now owns) to the writer and returns at
// once.
func (l *LatestOutput) Offer(doc []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next != nil {
		l.replaced++
	}
	l.next = doc
	if l.done == nil {
		l.done = make(chan struct{})
		go l.run(l.done)
	}
}

func (l *LatestOutput) run(done chan struct{}) {
	l.mu.Lock()
	for l.next != nil {
		doc := l.next
		l.next = nil
		l.mu.Unlock()
		err := l.t.Write(l.durable, func(w io.Writer) error {
			_, err := w.Write(doc)
			return err
		})
		l.mu.Lock()
		if err != nil && l.err == nil {
			l.err = err
		}
	}
	l.done = nil
	close(done)
	l.mu.Unlock()
}

// Replaced is how many documents were never written because a later one
// replaced them while a write was under way.
func (l *LatestOutput) Replaced() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.replaced
}

// Close waits at most wait for the last document offered to be written
// and returns the first write error; a write still under way after wait
// is an error naming the target (the goroutine is left to it).
func (l *LatestOutput) Close(wait time.Duration) error {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(wait):
			return fmt.Errorf("writing %s: still not written after %s (nothing read it); its last document was not written", l.t.Given, wait)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
