package cli

import (
	"collbench/internal/tempdir"
)

// tempDir makes a temporary directory (see tempdir.Make).
func tempDir(prefix string) (dir string, release func(), err error) { return tempdir.Make(prefix) }
