package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"collbench/bootstrap"
	"collbench/engine"
	"collbench/report"
)

// WorldOptions are the flags of `collbench world`.
type WorldOptions struct {
	IO               *IOStreams
	Factory          *Factory
	Ctx              context.Context
	BootstrapTimeout time.Duration
}

// NewCmdWorld builds `collbench world`.
func NewCmdWorld(f *Factory, runF func(*WorldOptions) error) *cobra.Command {
	o := &WorldOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "world",
		Short: "Show how the launcher formed the world of processes (no GPU needed)",
		Long: `world joins the other processes the launcher started (collbench launch, torchrun,
Slurm, mpirun), exchanges a message with each, and prints every rank's host and
local rank: a quick check of launcher wiring before a benchmark.`,
		Args:    noArgs,
		Example: "  mpirun -np 4 collbench world\n  srun -N 2 --ntasks-per-node 4 collbench world\n  collbench launch -n 4 -- world",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return worldRun(o)
		},
	}
	cmd.Flags().DurationVar(&o.BootstrapTimeout, "bootstrap-timeout", engine.DefaultRunFlags().BootstrapTimeout, "how long the processes may take to find each other")
	atLeast(cmd.Flags(), "1ns", "bootstrap-timeout")
	return cmd
}

func worldRun(o *WorldOptions) error {
	f := o.Factory
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	launch, err := f.DetectLaunch()
	if err != nil {
		return err
	}
	if !launch.MultiProcess() {
		fmt.Fprintf(o.IO.Out, "single process: no launcher variables found (host %s)\n", f.HostIdentity())
		return nil
	}
	start := time.Now()
	pw, err := f.JoinProcesses(ctx, launch, f.Args[1:], o.BootstrapTimeout, bootstrap.DefaultSilence)
	if err != nil {
		return err
	}
	defer pw.Close()
	me, _ := json.Marshal(report.WorldMember{Rank: launch.Rank, Host: f.HostIdentity(), LocalRank: launch.LocalRank, PID: os.Getpid()})
	joined := time.Since(start)
	parts, err := pw.Ctl.AllGather(me)
	if err != nil {
		return &engine.RunError{Err: err}
	}
	if !pw.Rank0() {
		return nil
	}
	w := o.IO.Out
	fmt.Fprintf(w, "world of %d processes, launched by %s, joined over %s in %.2f s; every process's reply gathered in %.2f s\n",
		launch.Size, launch.Source, transport(pw), joined.Seconds(), (time.Since(start) - joined).Seconds())
	fmt.Fprintf(w, "detected from: %s\n", strings.Join(launch.Evidence, " "))
	members := make([]report.WorldMember, len(parts))
	for r, p := range parts {
		if err := json.Unmarshal(p, &members[r]); err != nil || members[r].Rank != r {
			return &engine.RunError{Err: fmt.Errorf("rank %d sent a malformed reply", r)}
		}
	}
	return report.WriteWorld(w, members)
}

func transport(pw *engine.ProcessWorld) string {
	if pw.Launch.RootAddr != "" {
		return "TCP (rank 0 at " + pw.Launch.RootAddr + ")"
	}
	return "TCP (rank 0's address shared over MPI)"
}
