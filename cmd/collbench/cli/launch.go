package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/launch"
)

// LaunchOptions are the flags of `collbench launch`.
type LaunchOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context
	Procs   int
	Nodes   int
	Port    int
	Args    []string
	Binary  string // the collbench to start; this executable by default
	// NNodes, NodeRank and RootAddr join this host's processes to those
	// that launch starts on other hosts: node r's process i is world rank
	// r*Procs+i, and rank 0 serves the rendezvous at RootAddr.
	NNodes   int
	NodeRank int
	RootAddr string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
}

// NewCmdLaunch builds `collbench launch`.
func NewCmdLaunch(f *Factory, runF func(*LaunchOptions) error) *cobra.Command {
	o := &LaunchOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "launch -n N [--nodes K] -- COMMAND [FLAGS]",
		Short: "Start N collbench processes on this host, one GPU each, as one world",
		Long: `launch starts N processes of collbench on this host, one per GPU, wires their
environment (rank, world size, local rank, rendezvous address) and streams their
output: rank 0's unchanged, the others' prefixed with their rank. It exits with
the worst exit code of its processes; Ctrl-C stops them all.

--nodes K splits the processes into K simulated nodes (different NCCL_HOSTID), so
NCCL treats them as separate hosts and uses its network transport between them.`,
		Example: "  collbench launch -n 4 -- allreduce --sizes 8:1G\n  collbench launch -n 4 --nodes 2 -- sweep --collectives all\n  collbench launch -n 4 -- world",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return engine.UsageErrorf("launch needs a collbench command to run, e.g. collbench launch -n 4 -- allreduce")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			o.Args = args
			if runF != nil {
				return runF(o)
			}
			return launchRun(o)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().IntVarP(&o.Procs, "procs", "n", 0, "number of processes (default: one per visible GPU, or 4 without GPUs)")
	cmd.Flags().IntVar(&o.Nodes, "nodes", 1, "simulated nodes the processes are split into (different NCCL_HOSTID)")
	cmd.Flags().IntVar(&o.Port, "port", 0, "rendezvous port on 127.0.0.1 (default: a free port)")
	cmd.Flags().IntVar(&o.NNodes, "nnodes", 0, "hosts that each run launch for one world (default: $COLLBENCH_NNODES, $SLURM_NNODES, or 1)")
	cmd.Flags().IntVar(&o.NodeRank, "node-rank", -1, "this host's index among --nnodes (default: $COLLBENCH_NODE_RANK, the pod's index in a Kubernetes Indexed Job or JobSet, or $SLURM_NODEID)")
	cmd.Flags().StringVar(&o.RootAddr, "root-addr", "", "with --nnodes: host:port where node 0 serves the rendezvous (default: $COLLBENCH_ROOT_ADDR)")
	atLeast(cmd.Flags(), "1", "procs", "nodes", "nnodes")
	atLeast(cmd.Flags(), "0", "port", "node-rank")
	return cmd
}

func launchRun(o *LaunchOptions) error {
	procs := o.Procs
	if procs == 0 {
		procs = visibleGPUs(o.Factory)
	}
	err := launch.Run(o.Ctx, launch.Config{Procs: procs, Nodes: o.Nodes, Port: o.Port, Args: o.Args, Binary: o.Binary,
		NNodes: o.NNodes, NodeRank: o.NodeRank, RootAddr: o.RootAddr, Getenv: o.Getenv,
		Stdout: o.IO.Out, Stderr: o.IO.ErrOut, CheckArgs: childArgsError, SignalOf: signalOf})
	var pe *launch.PlanError
	var st *launch.Stopped
	var ee *launch.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return &engine.UsageError{Err: pe.Err}
	case errors.As(err, &st):
		return &engine.SignalError{Sig: st.Signal, Rows: -1}
	case errors.As(err, &ee):
		return &engine.ExitCodeError{Code: ee.Code}
	}
	return &engine.RunError{Err: err}
}

// plan is the launch plan of these options, as launchRun would make it.
func (o *LaunchOptions) plan() (launch.Plan, error) {
	return launch.PlanOf(launch.Config{Procs: o.Procs, Nodes: o.Nodes, Port: o.Port, Args: o.Args,
		NNodes: o.NNodes, NodeRank: o.NodeRank, RootAddr: o.RootAddr, Getenv: o.Getenv, CheckArgs: childArgsError})
}

// signalOf is the signal that cancelled ctx, or nil.
func signalOf(ctx context.Context) os.Signal {
	var sc *engine.SignalCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc.Sig
	}
	return nil
}

// writeLaunchReport leaves this rank's fault for the launcher, if it
// started this process.
func (f *Factory) writeLaunchReport(err error) { launch.WriteReport(f.Getenv, err) }

// visibleGPUs counts GPUs through the NCCL backend, or returns 4 when there
// are none, as the CPU backend's default.
func visibleGPUs(f *Factory) int {
	if b, err := f.OpenNCCL(""); err == nil {
		return b.DefaultRanks()
	}
	return 4
}

// childArgsError checks the command launch is to start in every process
// against collbench's own command tree (the command exists, its flags
// parse), so a typo fails once, at once, rather than in N processes.
func childArgsError(args []string) error {
	streams := &IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
	root := NewCmdRoot(NewFactory(streams))
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		return fmt.Errorf("launch: %q is not a collbench command (see 'collbench --help')", args[0])
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("launch: the command to start is not valid: %v (see '%s --help')", err, cmd.CommandPath())
	}
	return nil
}
