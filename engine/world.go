package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"collbench/bootstrap"
	"collbench/report"
)

// WorldReport is how a launcher's world formed (collbench world): who
// launched it and from which variables, the transport, how long joining
// and gathering every process's reply took, and the members (rank 0 only).
type WorldReport struct {
	Source, Transport string
	Evidence          []string
	Joined, Gathered  time.Duration
	Members           []report.WorldMember
}

// FormWorld joins the launcher's world and gathers every process's rank,
// host, local rank and pid on rank 0. A single process gets nil; a process
// other than rank 0 a report without members.
func (f *System) FormWorld(ctx context.Context, timeout time.Duration) (*WorldReport, error) {
	launch, err := f.DetectLaunch()
	if err != nil {
		return nil, err
	}
	if !launch.MultiProcess() {
		return nil, nil
	}
	start := time.Now()
	pw, err := f.JoinProcesses(ctx, launch, commandArgs(f.Args), timeout, bootstrap.DefaultSilence)
	if err != nil {
		return nil, err
	}
	defer pw.Close()
	me, _ := json.Marshal(report.WorldMember{Rank: launch.Rank, Host: f.HostIdentity(), LocalRank: launch.LocalRank, PID: os.Getpid()})
	joined := time.Since(start)
	parts, err := pw.Ctl.AllGather(me)
	if err != nil {
		return nil, &RunError{Err: err}
	}
	wr := &WorldReport{Source: launch.Source, Transport: transport(pw), Evidence: launch.Evidence, Joined: joined, Gathered: time.Since(start) - joined}
	if !pw.Rank0() {
		return wr, nil
	}
	wr.Members = make([]report.WorldMember, len(parts))
	for r, p := range parts {
		if err := json.Unmarshal(p, &wr.Members[r]); err != nil || wr.Members[r].Rank != r {
			return nil, &RunError{Err: fmt.Errorf("rank %d sent a malformed reply", r)}
		}
	}
	return wr, nil
}

func transport(pw *ProcessWorld) string {
	if pw.Launch.RootAddr != "" {
		return "TCP (rank 0 at " + pw.Launch.RootAddr + ")"
	}
	return "TCP (rank 0's address shared over MPI)"
}
