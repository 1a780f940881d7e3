package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"collbench/bootstrap"
)

// TestFaultFindingNamesThePart: each fault that can end a doctor run
// becomes the finding that names the rank at fault (or the run, for a
// signal), with the kind a dashboard can count.
func TestFaultFindingNamesThePart(t *testing.T) {
	who := func(r int) string { return fmt.Sprintf("rank %d (node-%d, GPU 0000:%02d:00.0)", r, r/8, r%8) }
	cases := []struct {
		err             error
		sev, kind, part string
		ranks           []int
	}{
		{&bootstrap.PeerError{Kind: bootstrap.FaultHung, Rank: 13, Msg: "watchdog: rank 13 has not finished"}, "FAIL", "hung-rank", "rank 13 (node-1, GPU 0000:05:00.0)", []int{13}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultSilent, Rank: 2, Msg: "rank 2 stopped answering"}, "FAIL", "silent-rank", "rank 2 (node-0, GPU 0000:02:00.0)", []int{2}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultDisconnected, Rank: 9, Msg: "rank 9 disconnected"}, "FAIL", "lost-rank", "rank 9 (node-1, GPU 0000:01:00.0)", []int{9}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultFailed, Rank: 4, Msg: "rank 4 failed: out of memory"}, "FAIL", "failed-rank", "rank 4 (node-0, GPU 0000:04:00.0)", []int{4}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultInterrupted, Rank: 3, Msg: "rank 3 was interrupted"}, "WARN", "interrupted", "rank 3 (node-0, GPU 0000:03:00.0)", []int{3}},
		{&SignalError{Sig: syscall.SIGTERM}, "WARN", "interrupted", "the run", nil},
		{&RunError{Err: errors.New("ncclCommInitRank: unhandled system error")}, "FAIL", "run-failed", "the run", nil},
	}
	for _, c := range cases {
		f := faultFinding(c.err, who)
		if f.Severity != c.sev || f.Kind != c.kind || f.Part != c.part || !slices.Equal(f.Ranks, c.ranks) || f.Msg == "" || f.Cause == "" {
			t.Errorf("%v: %+v", c.err, f)
		}
	}
	if f := faultFinding(&SignalError{Sig: syscall.SIGTERM}, who); f.Msg != "the run was terminated before the verdict" {
		t.Errorf("signal: %q", f.Msg)
	}
}

// TestDoctorSkipsWhatCannotRunHere: on one rank of one host, the pair,
// across-hosts and whole-world stages are not announced as running; the
// report says why each was skipped, and its seconds are the whole run's.
func TestDoctorSkipsWhatCannotRunHere(t *testing.T) {
	sys, _ := testSystem()
	var said []string
	d := Doctor{Backend: "cpu", Ranks: 1, Quick: true, RunFlags: DefaultRunFlags(), Progress: func(s string) { said = append(said, s) }}
	rep, err := sys.RunDoctor(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(said) != 1 || said[0] != "each rank alone" {
		t.Errorf("announced %q, want only the stage that runs", said)
	}
	want := map[string]string{"every rank pair within a host": "no host has two ranks", "across hosts": "one host", "the whole world": "one rank"}
	for _, s := range rep.Stages {
		if s.Skipped != want[s.Stage] {
			t.Errorf("stage %q: skipped %q, want %q", s.Stage, s.Skipped, want[s.Stage])
		}
	}
	if len(rep.Stages) != 4 || rep.Seconds < rep.Stages[0].Seconds || rep.Seconds <= 0 {
		t.Errorf("stages %+v, run %.3f s", rep.Stages, rep.Seconds)
	}
}
