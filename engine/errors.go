package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"collbench/bootstrap"
	"collbench/internal/bounded"
	"collbench/internal/tempdir"
)

// Exit codes. Documented in the README (exit codes).
const (
	ExitOK          = 0
	ExitCheckFailed = 1 // a verification or regression check failed
	ExitUsage       = 2 // bad flags, arguments or input files; a missing library asked for by name
	ExitRunFailed   = 3 // the run could not complete (backend error, a process of the world died, I/O)
	ExitHung        = 4 // the watchdog or the heartbeat stopped a rank that made no progress or went silent
	// ExitInconclusive: compare found nothing worse but could not judge
	// some rows or bands: the runs' own spread is wider than the change
	// asked for.
	ExitInconclusive = 5
	ExitInterrupted  = 130
	ExitTerminated   = 143
)

// UsageError is bad input: the message names the problem and the valid choices.
type UsageError struct {
	Err error
	// Own is set on a refusal this process reaches alone (rank 0's output
	// path): the other processes of the world are told it. One that every
	// process reaches alike (a plan, a size) is not relayed: each says it.
	Own bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// UsageErrorf makes a UsageError from a format and its arguments.
func UsageErrorf(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// ListenError is bad input: addr, given by the user, cannot be listened
// on; the message says why in words (a port in use, one that needs root,
// an address that is not this host's).
func ListenError(addr string, err error) error {
	return UsageErrorf("cannot listen on %s: %s", addr, bootstrap.ListenReason(err))
}

// RunError is a failure while running: the backend or the system failed.
type RunError struct{ Err error }

func (e *RunError) Error() string { return e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// CheckFailedError reports wrong results or regressions.
type CheckFailedError struct{ Msg string }

func (e *CheckFailedError) Error() string { return e.Msg }

// InconclusiveError reports a comparison that could not judge: nothing
// regressed, but the runs' own spread hides a change of the size asked for.
type InconclusiveError struct{ Msg string }

func (e *InconclusiveError) Error() string { return e.Msg }

// StoppedReading reports whether a signal stopped the wait for an input
// file (a named pipe nobody writes) and err does not carry the signal's
// exit code yet.
func StoppedReading(err error) bool {
	var stopped *bounded.StoppedError
	var se *SignalError
	return errors.As(err, &stopped) && !errors.As(err, &se)
}

// ExitCode maps an error to the process exit code by its type; an error no
// type claims is a failed run (ExitRunFailed).
func ExitCode(err error) int {
	var ue *UsageError
	var re *RunError
	var ce *CheckFailedError
	var xe *ExitCodeError
	var ie *InconclusiveError
	var pe *bootstrap.PeerError
	var se *SignalError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &xe):
		return xe.Code
	case errors.As(err, &ce):
		return ExitCheckFailed
	case errors.As(err, &ie):
		return ExitInconclusive
	case errors.As(err, &pe):
		switch pe.Kind {
		case bootstrap.FaultHung, bootstrap.FaultSilent:
			return ExitHung
		case bootstrap.FaultInterrupted:
			return ExitInterrupted
		}
		return ExitRunFailed
	case errors.As(err, &se):
		return se.Code()
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &re):
		return ExitRunFailed
	}
	// An error no type claims is a run that failed, never a usage error:
	// CI must not read a GPU or network failure as a typo.
	return ExitRunFailed
}

// SignalError reports a run stopped by a signal (Ctrl-C, SIGTERM).
type SignalError struct {
	Sig  os.Signal
	Rows int
}

func (e *SignalError) Error() string {
	name := "interrupted"
	if e.Sig == syscall.SIGTERM {
		name = "terminated"
	}
	if e.Rows < 0 {
		return name // the launcher: its ranks said what they kept
	}
	return fmt.Sprintf("%s; %d rows measured before are kept", name, e.Rows)
}

func (e *SignalError) Code() int {
	if e.Sig == syscall.SIGTERM {
		return ExitTerminated
	}
	return ExitInterrupted
}

// ExitCodeError passes a child's exit code through without a message (the
// child already printed one).
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return "" }

// SignalCause is why a run's context ended: a signal arrived.
type SignalCause struct{ Sig os.Signal }

func (c *SignalCause) Error() string { return "stopped by " + c.Sig.String() }

// OnExit registers fn to run if the process exits through ExitNow (a run
// that did not stop after a signal); the returned function unregisters it.
func OnExit(fn func()) func() { return tempdir.OnExit(fn) }

// ExitNow ends the process with code after the exit cleanups (the
// temporary directories of the running command).
func ExitNow(code int) {
	tempdir.RunExitCleanups()
	os.Exit(code)
}

// exitReason is why the process is exiting through ExitBecause.
var exitReason atomic.Pointer[string]

// ExitBecause exits at once, as ExitNow, after telling the exit cleanups
// (ExitReason) why: a results file can still record it.
func ExitBecause(code int, reason string) {
	exitReason.Store(&reason)
	ExitNow(code)
}

// ExitReason is the reason given to ExitBecause, "" otherwise.
func ExitReason() string {
	if r := exitReason.Load(); r != nil {
		return *r
	}
	return ""
}
