package cli

import (
	"os"

	"collbench/internal/tempdir"
)

// exitNow ends the process with code after the exit cleanups (the
// temporary directories of the running command).
func exitNow(code int) {
	tempdir.RunExitCleanups()
	os.Exit(code)
}

// tempDir makes a temporary directory (see tempdir.Make).
func tempDir(prefix string) (dir string, release func(), err error) { return tempdir.Make(prefix) }
