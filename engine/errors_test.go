package engine

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"collbench/bootstrap"
)

// TestExitCodeByType: every exit code comes from the error's type, through
// any wrapping; an error no type claims is a failed run, never a usage
// error.
func TestExitCodeByType(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{UsageErrorf("bad --sizes"), ExitUsage},
		{fmt.Errorf("suite 2: %w", &UsageError{Err: errors.New("bad")}), ExitUsage},
		{&CheckFailedError{Msg: "3 wrong elements"}, ExitCheckFailed},
		{&RunError{Err: errors.New("ncclCommInitRank failed")}, ExitRunFailed},
		{errors.New("a GPU fell off the bus"), ExitRunFailed},
		{&bootstrap.PeerError{Kind: bootstrap.FaultHung, Rank: 3}, ExitHung},
		{&bootstrap.PeerError{Kind: bootstrap.FaultSilent, Rank: 3}, ExitHung},
		{&bootstrap.PeerError{Kind: bootstrap.FaultDisconnected, Rank: 3}, ExitRunFailed},
		{&SignalError{Sig: syscall.SIGTERM}, ExitTerminated},
		{&SignalError{Sig: syscall.SIGINT}, ExitInterrupted},
		{fmt.Errorf("waiting: %w", context.Canceled), ExitInterrupted},
		{&ExitCodeError{Code: 137}, 137},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.want)
		}
	}
}
