//go:build !mpi

package mpi

import (
	"errors"

	"collbench/measure"
)

// Available reports whether this build has the mpi backend.
const Available = false

// New fails: the mpi backend is in the MPI build only.
func New(opts Options) (measure.Backend, error) {
	return nil, errors.New("this collbench was built without MPI: build it with make build-mpi and run bin/collbench-mpi under mpirun")
}

// DeviceNote says why the mpi backend does not use GPU memory here.
func DeviceNote() string {
	return "in bin/collbench-mpi (make build-mpi), with an MPI that is CUDA-aware"
}

// Describe fails: this build has no MPI library.
func Describe() (string, error) {
	return "", errors.New("not in this build (make build-mpi builds bin/collbench-mpi)")
}
