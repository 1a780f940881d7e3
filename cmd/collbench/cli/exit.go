package cli

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
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
// exitNow if the process exits first. A process killed by SIGKILL leaves
// it behind; its name carries the process id, so the next collbench that
// makes one removes those whose process is gone.
func tempDir(prefix string) (dir string, release func(), err error) {
	removeStaleTempDirs(os.TempDir())
	dir, err = os.MkdirTemp("", prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", nil, err
	}
	unregister := onExit(func() { _ = os.RemoveAll(dir) })
	return dir, func() {
		unregister()
		_ = os.RemoveAll(dir)
	}, nil
}

// staleDir matches the temporary directories tempDir makes: collbench-,
// a kind, the process id, a random part.
var staleDir = regexp.MustCompile(`^collbench-[a-z]+-([0-9]+)-[0-9]+$`)

// removeStaleTempDirs removes, under dir, the temporary directories of
// collbench processes that no longer exist (killed before they could).
func removeStaleTempDirs(dir string) {
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
