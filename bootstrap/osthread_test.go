package bootstrap

import (
	"syscall"
	"testing"
	"time"
)

func TestOSThreadRunsEveryCallOnItsThread(t *testing.T) {
	th := startOSThread()
	var tids [3]int
	for i := range tids {
		th.Do(func() { tids[i] = syscall.Gettid() })
	}
	// A call made from the thread itself runs at once (no deadlock).
	var inner int
	th.Do(func() { th.Do(func() { inner = syscall.Gettid() }) })
	for i, tid := range append(tids[:], inner) {
		if tid != th.tid {
			t.Fatalf("call %d ran on thread %d, want %d", i, tid, th.tid)
		}
	}
	if !th.idle(0) {
		t.Fatalf("busy = %d after every Do returned", th.busy.Load())
	}
}

// TestOSThreadIdleWaitsForACallThatHandedBackItsResult: a caller that
// learns from inside f that its work is done may go on before its Do has
// returned. idle must wait for that call, not take it for a stuck one (MPI
// was once left unfinalised after a clean run this way).
func TestOSThreadIdleWaitsForACallThatHandedBackItsResult(t *testing.T) {
	th := startOSThread()
	for i := 0; i < 200; i++ {
		got := make(chan struct{})
		release := make(chan struct{})
		go th.Do(func() {
			close(got)
			<-release // the call is still on the thread after it signalled
		})
		<-got
		go func() { time.Sleep(2 * time.Millisecond); close(release) }()
		if !th.idle(time.Second) {
			t.Fatalf("round %d: a call that returned within milliseconds was taken for a stuck one", i)
		}
	}
}

func TestOSThreadIdleGivesUpOnAStuckCall(t *testing.T) {
	th := startOSThread()
	stuck := make(chan struct{})
	defer close(stuck)
	entered := make(chan struct{})
	go th.Do(func() { close(entered); <-stuck })
	<-entered
	start := time.Now()
	if th.idle(50 * time.Millisecond) {
		t.Fatal("idle reported a thread inside a call that never returns as idle")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("idle waited %v, past its grace of 50ms", waited)
	}
}
