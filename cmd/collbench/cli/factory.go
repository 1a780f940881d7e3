package cli

import (
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/engine"
)

// Factory holds what commands need from the outside world, so tests can
// replace any of it: the IO streams, and the System the engine runs on.
type Factory struct {
	IO *IOStreams
	engine.System
}

// NewFactory returns a Factory wired to the real system.
func NewFactory(io *IOStreams) *Factory {
	return &Factory{IO: io, System: engine.System{
		Stderr:   io.ErrOut,
		Hostname: os.Hostname,
		Now:      time.Now,
		Environ:  os.Environ,
		NCCL:     loadNCCL,
		NVML:     func() nvml.Interface { return nvml.New() },
	}}
}
