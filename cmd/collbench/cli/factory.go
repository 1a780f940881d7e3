package cli

import (
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
	return &Factory{IO: io, System: engine.RealSystem(io.ErrOut)}
}
