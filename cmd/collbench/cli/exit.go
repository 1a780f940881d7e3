package cli

import (
	"os"
	"sync"
)

// atExit holds what must be undone even when the process exits at once,
// without unwinding (a second signal, or the hard exit after an abort that
// did not stop the run): the temporary directories of the running command.
var atExit struct {
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// onExit registers fn to run if the process exits through exitNow; the
// returned function unregisters it.
func onExit(fn func()) (unregister func()) {
	atExit.mu.Lock()
	defer atExit.mu.Unlock()
	if atExit.fns == nil {
		atExit.fns = map[int]func(){}
	}
	id := atExit.next
	atExit.next++
	atExit.fns[id] = fn
	return func() {
		atExit.mu.Lock()
		defer atExit.mu.Unlock()
		delete(atExit.fns, id)
	}
}

// runExitCleanups runs, once each, every function registered with onExit.
func runExitCleanups() {
	atExit.mu.Lock()
	fns := atExit.fns
	atExit.fns = nil
	atExit.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// exitNow ends the process with code after the exit cleanups.
func exitNow(code int) {
	runExitCleanups()
	os.Exit(code)
}

// tempDir makes a temporary directory that is removed by release, or by
// exitNow if the process exits first. A process killed by SIGKILL still
// leaves it behind: callers keep only small files there.
func tempDir(prefix string) (dir string, release func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	unregister := onExit(func() { _ = os.RemoveAll(dir) })
	return dir, func() {
		unregister()
		_ = os.RemoveAll(dir)
	}, nil
}
