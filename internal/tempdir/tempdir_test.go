package tempdir

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTempDirIsRemovedOnEitherPath: a temporary directory goes with its
// release, or with the exit cleanups when the process exits at once; once
// released, the exit cleanups no longer touch it.
func TestTempDirIsRemovedOnEitherPath(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	released, release, err := Make("collbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := os.Stat(released); !os.IsNotExist(err) {
		t.Errorf("released directory still there: %v", err)
	}
	// A directory of the same name made again after release is not the
	// exit cleanups' to remove.
	if err := os.Mkdir(released, 0o700); err != nil {
		t.Fatal(err)
	}
	atExitNow, _, err := Make("collbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	RunExitCleanups()
	if _, err := os.Stat(atExitNow); !os.IsNotExist(err) {
		t.Errorf("exit cleanups left %s: %v", atExitNow, err)
	}
	if _, err := os.Stat(released); err != nil {
		t.Errorf("exit cleanups removed a released directory's successor: %v", err)
	}
}

// TestStaleTempDirsOfDeadProcessesAreRemoved: a temporary directory left by
// a collbench that was killed (SIGKILL runs no cleanup) is removed by the
// next one that makes a temporary directory; those of live processes and
// other programs' stay.
func TestStaleTempDirsOfDeadProcessesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skip("cannot start a process:", err)
	}
	dead := fmt.Sprintf("collbench-launch-%d-123", gone.Process.Pid)
	live := fmt.Sprintf("collbench-probe-%d-456", os.Getppid())
	other := "collbench-notes"
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(dir, d, "sub"), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
	made, release, err := Make("collbench-launch-")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !strings.HasPrefix(filepath.Base(made), fmt.Sprintf("collbench-launch-%d-", os.Getpid())) {
		t.Errorf("the new directory %s does not carry this process's id", made)
	}
	if _, err := os.Stat(filepath.Join(dir, dead)); err == nil {
		t.Error("the dead process's directory was left")
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(filepath.Join(dir, d)); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// TestTempDirIsRemovedWhileWrittenInto: another process's files written
// into the directory while it is being removed (ranks leave their reports
// as the launcher exits at once) do not leave it behind, on either path.
func TestTempDirIsRemovedWhileWrittenInto(t *testing.T) {
	for _, exitAtOnce := range []bool{false, true} {
		for try := range 5 {
			dir, release, err := Make("collbench-test-")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Write files until the directory is gone (a write then
				// fails), for 100 ms at most.
				end := time.Now().Add(100 * time.Millisecond)
				for i := 0; time.Now().Before(end); i++ {
					if os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", i)), []byte("{}"), 0o600) != nil {
						return
					}
				}
			}()
			time.Sleep(200 * time.Microsecond)
			if exitAtOnce {
				RunExitCleanups()
				release = func() {}
			}
			release()
			<-done
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("exit at once %v, try %d: %s left behind (%v)", exitAtOnce, try, dir, err)
			}
		}
	}
}

// TestExitCleanupsRunLatestFirst: the exit cleanups run in the reverse of
// their registration, as deferred calls do, so the processes a launcher
// started after making its directory are stopped before the directory is
// removed (under load one was left behind, probably by a rank writing its
// report into it as it went); one unregistered does not run.
func TestExitCleanupsRunLatestFirst(t *testing.T) {
	var order []int
	for i := range 5 {
		unregister := OnExit(func() { order = append(order, i) })
		if i == 2 {
			unregister()
		}
	}
	RunExitCleanups()
	if fmt.Sprint(order) != "[4 3 1 0]" {
		t.Errorf("ran in the order %v, want [4 3 1 0]", order)
	}
	RunExitCleanups()
	if len(order) != 4 {
		t.Errorf("ran twice: %v", order)
	}
}

// TestEndOnExitStopsTheWriterFirst: a child process that writes into a
// temporary directory (here one that even makes it again) is ended, and
// waited for, before the exit cleanups remove the directory, so nothing is
// left behind by an exit at once.
func TestEndOnExitStopsTheWriterFirst(t *testing.T) {
	dir, _, err := Make("collbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `while :; do mkdir -p "$0" && : > "$0/rank-1.json"; done`, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its mkdir too goes with the group
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(ended)
	}()
	EndOnExit(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }, ended)
	time.Sleep(50 * time.Millisecond)
	RunExitCleanups()
	select {
	case <-ended:
	default:
		t.Fatal("the writer still runs after the exit cleanups")
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", dir, err)
	}
}
