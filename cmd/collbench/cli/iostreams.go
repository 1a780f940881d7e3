// Package cli holds collbench's Cobra commands. Each command has an options
// struct, a NewCmdX constructor that takes a run function (so tests can stop
// before running) and an xRun function; IO streams come from the Factory.
package cli

import (
	"bytes"
	"io"
	"os"
)

// IOStreams are the streams commands read and write.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// ErrTTY reports whether ErrOut is a terminal (progress is shown only then).
	ErrTTY bool
}

// SystemIO returns the process's standard streams.
func SystemIO() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr, ErrTTY: isTerminal(os.Stderr)}
}

// TestIO returns streams backed by buffers, for tests.
func TestIO() (*IOStreams, *bytes.Buffer, *bytes.Buffer) {
	out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: &bytes.Buffer{}, Out: out, ErrOut: errOut}, out, errOut
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
