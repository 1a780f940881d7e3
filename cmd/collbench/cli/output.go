package cli

import (
	"fmt"
	"io"

	"collbench/engine"
	"collbench/results"
)

// outputTarget resolves an output path the user named with flag, before
// anything runs: a usage error (exit 2) names the flag and the path.
func outputTarget(flag, path string) (*results.Output, error) {
	return engine.ResolveOutput(flag, path)
}

// writeTarget writes one whole document to t: standard output through out
// (the command's own stream), anything else through the one output writer.
func writeTarget(out io.Writer, t *results.Output, sync bool, write func(io.Writer) error) error {
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

// recordOutputs are a workflow's two files beside its table: the record
// (-o, rewritten as each result comes) and the tuner file (--tuner-file,
// written at the end); either is nil where not asked for.
type recordOutputs struct {
	record, tuner         *results.Output
	recordPath, tunerPath string
}

// resolveRecordOutputs resolves -o and --tuner-file where given.
func resolveRecordOutputs(record, tuner string) (*recordOutputs, error) {
	ro := &recordOutputs{recordPath: record, tunerPath: tuner}
	var err error
	if record != "" {
		if ro.record, err = engine.ResolveOutput("--output", record); err != nil {
			return nil, err
		}
	}
	if tuner != "" {
		if ro.tuner, err = engine.ResolveOutput("--tuner-file", tuner); err != nil {
			return nil, err
		}
	}
	return ro, nil
}

// rewriter is what keeps the record current as results come: nil where
// the record is not a file replaced on each write (a stream is written
// once, at the end); a write that fails is said on errOut and the run
// goes on.
func (ro *recordOutputs) rewriter(errOut io.Writer) func(write func(io.Writer) error) {
	if !ro.record.Replaced() {
		return nil
	}
	return func(write func(io.Writer) error) {
		if err := ro.record.Write(false, write); err != nil {
			fmt.Fprintf(errOut, "collbench: cannot update %s: %v\n", ro.recordPath, err)
		}
	}
}

// finish writes the record and the tuner file where asked, and says so;
// tunerWhat names the tuner file in that line.
func (ro *recordOutputs) finish(streams *IOStreams, record, tuner func(io.Writer) error, tunerWhat string) error {
	if ro.record != nil {
		if err := writeTarget(streams.Out, ro.record, true, record); err != nil {
			return err
		}
		sayWrote(streams.ErrOut, "every cell", ro.recordPath)
	}
	if ro.tuner != nil {
		if err := writeTarget(streams.Out, ro.tuner, true, tuner); err != nil {
			return err
		}
		sayWrote(streams.ErrOut, tunerWhat, ro.tunerPath)
	}
	return nil
}
