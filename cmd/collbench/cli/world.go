package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
	wr, err := f.FormWorld(ctx, o.BootstrapTimeout)
	switch {
	case err != nil:
		return err
	case wr == nil:
		fmt.Fprintf(o.IO.Out, "single process: no launcher variables found (host %s)\n", f.HostIdentity())
		return nil
	case wr.Members == nil:
		return nil // not rank 0
	}
	w := o.IO.Out
	fmt.Fprintf(w, "world of %d processes, launched by %s, joined over %s in %.2f s; every process's reply gathered in %.2f s\n",
		len(wr.Members), wr.Source, wr.Transport, wr.Joined.Seconds(), wr.Gathered.Seconds())
	fmt.Fprintf(w, "detected from: %s\n", strings.Join(wr.Evidence, " "))
	return report.WriteWorld(w, wr.Members)
}
