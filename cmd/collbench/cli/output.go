package cli

import (
	"fmt"
	"io"

	"collbench/engine"
)

// outputTarget resolves an output path the user named with flag, before
// anything runs: a usage error (exit 2) names the flag and the path.
func outputTarget(flag, path string) (*engine.Output, error) {
	return engine.ResolveOutput(flag, path)
}

// writeTarget writes one whole document to t: standard output through out
// (the command's own stream), anything else through the one output writer.
func writeTarget(out io.Writer, t *engine.Output, sync bool, write func(io.Writer) error) error {
	if t.IsStdout() && out != nil {
		if err := write(out); err != nil {
			return &engine.RunError{Err: err}
		}
		return nil
	}
	if err := t.Write(sync, write); err != nil {
		return &engine.RunError{Err: err}
	}
	return nil
}

// writeTo writes to path, or to out when path is empty; flag names the
// option that gave path, for errors.
func writeTo(out io.Writer, flag, path string, write func(io.Writer) error) error {
	if path == "" {
		if err := write(out); err != nil {
			return &engine.RunError{Err: err}
		}
		return nil
	}
	t, err := outputTarget(flag, path)
	if err != nil {
		return err
	}
	return writeTarget(out, t, true, write)
}

// sayWrote tells the user on stderr what was written where; nothing when
// it went to standard output.
func sayWrote(errOut io.Writer, what, path string) {
	if path == "" || path == "-" || path == "/dev/stdout" {
		return
	}
	fmt.Fprintf(errOut, "collbench: wrote %s to %s\n", what, path)
}
