package engine

import (
	"os"

	"collbench/results"
)

// ResolveOutput resolves path, named by flag, before anything runs
// (results.ResolveOutput); a path that cannot be written is a UsageError
// (exit 2) naming both.
func ResolveOutput(flag, path string) (*results.Output, error) {
	t, err := results.ResolveOutput(path)
	if err != nil {
		return nil, UsageErrorf("cannot write %s %v", flag, err)
	}
	return t, nil
}

// MakeOutputDir creates a results directory (run's --output) with its
// parents; one that cannot be made is a UsageError saying why.
func MakeOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a results directory is for the team to read
		return UsageErrorf("cannot create the --output directory %s: %s", dir, results.OutputReason(err))
	}
	return nil
}
