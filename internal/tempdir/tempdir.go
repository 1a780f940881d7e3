// Package tempdir makes collbench's temporary directories: each carries
// its process id, so one left by a killed process is removed by the next,
// and each is removed on any way out, an exit at once included.
package tempdir

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// atExit holds what must be undone even when the process exits at once,
// without unwinding (a second signal, or the hard exit after an abort that
// did not stop the run): the temporary directories of the running command.
var atExit struct {
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// OnExit registers fn to run when RunExitCleanups runs (the process exits
// at once); the returned function unregisters it.
func OnExit(fn func()) (unregister func()) {
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

// RunExitCleanups runs, once each, every function registered with OnExit,
// the latest first (as deferred calls run): what was set up inside a
// temporary directory's life, such as processes that write into it, is
// undone before the directory is removed.
func RunExitCleanups() {
	atExit.mu.Lock()
	fns := atExit.fns
	atExit.fns = nil
	atExit.mu.Unlock()
	for _, id := range slices.Backward(slices.Sorted(maps.Keys(fns))) {
		fns[id]()
	}
}

// EndOnExit registers, for an exit at once, the end of a child process
// that writes into a temporary directory made before it was started: kill,
// then a wait for done of at most a second, all before the directory is
// removed (the exit cleanups run latest first). It returns the function
// that unregisters it.
func EndOnExit(kill func(), done <-chan struct{}) (unregister func()) {
	return OnExit(func() {
		kill()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	})
}

// Make makes a temporary directory named PREFIX, the process id and a
// random part, removed by release, or by RunExitCleanups if the process
// exits first. A process killed by SIGKILL leaves
// it behind; its name carries the process id, so the next collbench that
// makes one removes those whose process is gone.
func Make(prefix string) (dir string, release func(), err error) {
	removeStale(os.TempDir())
	dir, err = os.MkdirTemp("", prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", nil, err
	}
	unregister := OnExit(func() { removeAll(dir) })
	return dir, func() {
		unregister()
		removeAll(dir)
	}, nil
}

// removeAll removes dir and what it holds. A file another process writes
// into it while it is emptied (a rank's report as the launcher exits)
// leaves it not empty: it tries again, for up to removeFor.
func removeAll(dir string) {
	deadline := time.Now().Add(removeFor)
	for os.RemoveAll(dir) != nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// removeFor bounds removeAll's tries.
const removeFor = 500 * time.Millisecond

// staleDir matches the temporary directories Make makes: collbench-,
// a kind, the process id, a random part.
var staleDir = regexp.MustCompile(`^collbench-[a-z]+-([0-9]+)-[0-9]+$`)

// removeStale removes, under dir, the temporary directories of
// collbench processes that no longer exist (killed before they could).
func removeStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := staleDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		// ESRCH: no such process. EPERM means it lives (another user's).
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}
