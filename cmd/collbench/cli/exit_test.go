package cli

import (
	"os"
	"testing"
)

// TestTempDirIsRemovedOnEitherPath: a temporary directory goes with its
// release, or with the exit cleanups when the process exits at once; once
// released, the exit cleanups no longer touch it.
func TestTempDirIsRemovedOnEitherPath(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	released, release, err := tempDir("collbench-test-")
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
	atExitNow, _, err := tempDir("collbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	runExitCleanups()
	if _, err := os.Stat(atExitNow); !os.IsNotExist(err) {
		t.Errorf("exit cleanups left %s: %v", atExitNow, err)
	}
	if _, err := os.Stat(released); err != nil {
		t.Errorf("exit cleanups removed a released directory's successor: %v", err)
	}
}
