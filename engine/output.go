package engine

import (
	"os"

	"collbench/internal/outfile"
)

// Output is an output path a user named (-o, --prom, --html, --record, a
// file in run's --output directory), resolved before anything runs: a
// regular file is replaced atomically on every write, a device, pipe or
// symbolic link written through, never replaced (internal/outfile).
type Output = outfile.Target

// ResolveOutput resolves path, named by flag, before anything runs; a path
// that cannot be written is a UsageError (exit 2) naming both.
func ResolveOutput(flag, path string) (*Output, error) {
	t, err := outfile.Resolve(path)
	if err != nil {
		return nil, UsageErrorf("cannot write %s %v", flag, err)
	}
	return t, nil
}

// MakeOutputDir creates a results directory (run's --output) with its
// parents; one that cannot be made is a UsageError saying why.
func MakeOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a results directory is for the team to read
		return UsageErrorf("cannot create the --output directory %s: %s", dir, outfile.Reason(err))
	}
	return nil
}

// LatestOutput writes whole documents to an Output from a goroutine of its
// own, the latest winning, so that a caller that must not stall never
// waits on a slow disk or a pipe nobody reads (internal/outfile).
type LatestOutput = outfile.Latest

// NewLatestOutput starts a LatestOutput on t; durable asks each file write
// to reach the disk before it is renamed into place.
func NewLatestOutput(t *Output, durable bool) *LatestOutput { return outfile.NewLatest(t, durable) }
