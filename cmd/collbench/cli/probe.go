package cli

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"collbench/engine"
)

// The algorithm probe (package backend/nccl/probe) runs in a child process before
// the sweep, started by the engine; this is the hidden command it runs as.

// ProbeOptions are what the probe's child process needs: its pipes to the
// parent (file descriptors 3 and 4).
type ProbeOptions struct {
	Factory *Factory
	Ctx     context.Context
	In      io.Reader
	Out     io.Writer
}

// NewCmdAlgorithmProbe builds the hidden command the probe runs as. runF
// replaces probeRun in tests.
func NewCmdAlgorithmProbe(f *Factory, runF func(*ProbeOptions) error) *cobra.Command {
	o := &ProbeOptions{Factory: f}
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
			o.Ctx, o.In, o.Out = cmd.Context(), in, out
			if runF != nil {
				return runF(o)
			}
			return probeRun(o)
		},
	}
}

func probeRun(o *ProbeOptions) error {
	return o.Factory.ProbeChild(o.Ctx, o.In, o.Out)
}
