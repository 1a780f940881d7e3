//go:build !mpi

package bootstrap

import "errors"

// HasMPI reports whether this build can join an MPI world.
const HasMPI = false

// MPI is unavailable in builds without the mpi tag.
type MPI struct{}

// JoinMPI fails: this build has no MPI.
func JoinMPI(host string, args []string) (*MPI, error) {
	return nil, errors.New("this collbench was built without MPI (build with make build-mpi)")
}

// Rank is unavailable without MPI.
func (m *MPI) Rank() int { return 0 }

// Size is unavailable without MPI.
func (m *MPI) Size() int { return 1 }

// Hosts is unavailable without MPI.
func (m *MPI) Hosts() []string { return nil }

// AllGather is unavailable without MPI.
func (m *MPI) AllGather(data []byte) ([][]byte, error) {
	return nil, errors.New("no MPI in this build")
}

// Gather is unavailable without MPI.
func (m *MPI) Gather(data []byte) ([][]byte, error) {
	return nil, errors.New("no MPI in this build")
}

// Abort does nothing without MPI.
func (m *MPI) Abort(cause error) {}

// Close does nothing without MPI.
func (m *MPI) Close() error { return nil }
