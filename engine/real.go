package engine

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	mpib "collbench/backend/mpi"
	"collbench/backend/nccl"
	"collbench/backend/nccl/probe"
	"collbench/internal/faults"
	"collbench/measure"
)

// RealSystem is the System of this machine: its host name, clock and
// environment, NCCL and the CUDA driver loaded at run time, and NVML.
func RealSystem(stderr io.Writer) System {
	return System{
		Stderr:   stderr,
		Hostname: os.Hostname,
		Now:      time.Now,
		Environ:  os.Environ,
		NCCL:     LoadNCCL,
		NVML:     func() nvml.Interface { return nvml.New() },
	}
}

// LoadNCCL loads the NCCL backend. NVLink SHARP (multicast) stays off
// unless the environment already says otherwise: NCCL_NVLS_ENABLE=0 is set
// before NCCL reads its environment.
func LoadNCCL(lib string) (measure.Backend, error) {
	if _, ok := os.LookupEnv("NCCL_NVLS_ENABLE"); !ok {
		_ = os.Setenv("NCCL_NVLS_ENABLE", "0")
	}
	b, err := nccl.Open(nccl.Options{Lib: lib})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ProbeChild is the algorithm probe's child process (started by the
// engine before a sweep): it opens the backend f chooses and answers the
// parent over in and out.
func (f *System) ProbeChild(ctx context.Context, in io.Reader, out io.Writer) error {
	open := func(name, lib string) (measure.Backend, error) {
		c, err := f.ChooseBackend(name, lib)
		if err != nil {
			return nil, err
		}
		return c.Backend, nil
	}
	return probe.Child(ctx, open, f.Getenv(faults.EnvFaults), in, out)
}

// DescribeMPI names the MPI library this build runs with, or says why
// there is none (a build without the mpi tag).
func DescribeMPI() (string, error) { return mpib.Describe() }
