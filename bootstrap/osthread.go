package bootstrap

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// osThread runs functions one at a time on one locked OS thread: a library
// initialised without thread support (MPI here) must see every call from
// the thread that initialised it.
type osThread struct {
	tasks chan func()
	tid   int
	// busy counts calls handed to the thread whose Do has not returned.
	busy atomic.Int32
}

// startOSThread starts the thread; it runs until the process ends.
func startOSThread() *osThread {
	t := &osThread{tasks: make(chan func())}
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		t.tid = syscall.Gettid()
		close(started)
		for f := range t.tasks {
			f()
		}
	}()
	<-started
	return t
}

// Do runs f on the thread and waits for it. Called from the thread itself
// (f of an earlier Do), it runs f at once.
func (t *osThread) Do(f func()) {
	if syscall.Gettid() == t.tid {
		f()
		return
	}
	t.busy.Add(1)
	defer t.busy.Add(-1)
	done := make(chan struct{})
	t.tasks <- func() { f(); close(done) }
	<-done
}

// idleGraceStep is how often idle looks again.
const idleGraceStep = time.Millisecond

// idle reports whether every call handed to the thread has returned, waiting
// up to grace for those still running. A caller may learn from inside f
// that its work is done and go on before its Do has returned: such a call
// ends within microseconds, while one that a fault left waiting does not
// end at all.
func (t *osThread) idle(grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for t.busy.Load() > 0 {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(idleGraceStep)
	}
	return true
}
