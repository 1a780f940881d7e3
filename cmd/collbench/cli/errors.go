package cli

import (
	"context"
	"errors"
	"fmt"
)

// Exit codes. Documented in the README.
const (
	ExitOK          = 0
	ExitCheckFailed = 1 // a verification or regression check failed
	ExitUsage       = 2 // bad flags, arguments or input files; a missing library asked for by name
	ExitRunFailed   = 3 // the run could not complete (backend error, out of memory, I/O)
	ExitInterrupted = 130
)

// UsageError is bad input: the message names the problem and the valid choices.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, a ...any) error {
	return &UsageError{fmt.Errorf(format, a...)}
}

// RunError is a failure while running: the backend or the system failed.
type RunError struct{ Err error }

func (e *RunError) Error() string { return e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// CheckFailedError reports wrong results or regressions.
type CheckFailedError struct{ Msg string }

func (e *CheckFailedError) Error() string { return e.Msg }

// ExitCode maps an error to the process exit code. Errors that no command
// classified come from Cobra itself (unknown command, bad flag) and are
// usage errors.
func ExitCode(err error) int {
	var ue *UsageError
	var re *RunError
	var ce *CheckFailedError
	var xe *exitCodeError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &xe):
		return xe.code
	case errors.As(err, &ce):
		return ExitCheckFailed
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &re):
		return ExitRunFailed
	}
	return ExitUsage
}
