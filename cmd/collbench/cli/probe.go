package cli

import (
	"os"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/internal/faults"
	"collbench/nccl/probe"
	"collbench/suites"
)

// The algorithm probe (package nccl/probe) runs in a child process before
// the sweep; this file decides whether to run it and starts it.

// NewCmdAlgorithmProbe builds the hidden command the probe runs as.
func NewCmdAlgorithmProbe(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:    "algorithm-probe",
		Short:  "Internal: the child process of the algorithm probe",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			in, out := os.NewFile(3, "probe-in"), os.NewFile(4, "probe-out")
			if in == nil || out == nil {
				return engine.UsageErrorf("algorithm-probe is started by collbench itself, with its pipes")
			}
			open := func(name, lib string) (suites.Backend, error) {
				c, err := f.ChooseBackend(name, lib)
				if err != nil {
					return nil, err
				}
				return c.Backend, nil
			}
			return probe.Child(cmd.Context(), open, f.Getenv(faults.EnvFaults), in, out)
		},
	}
}
