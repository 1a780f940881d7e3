//go:build !mpi

package bootstrap

import (
	"context"
	"errors"
	"time"
)

// HasMPI reports whether this build can join an MPI world.
const HasMPI = false

// MPI is unavailable in builds without the mpi tag.
type MPI struct{}

var errNoMPI = errors.New("this collbench was built without MPI (build it with make build-mpi and run bin/collbench-mpi)")

// JoinMPI fails: this build has no MPI.
func JoinMPI() (*MPI, error) { return nil, errNoMPI }

// JoinOverMPI fails: this build has no MPI.
func JoinOverMPI(ctx context.Context, m *MPI, o TCPOptions) (*TCP, error) { return nil, errNoMPI }

// Rank is unavailable without MPI.
func (m *MPI) Rank() int { return 0 }

// Size is unavailable without MPI.
func (m *MPI) Size() int { return 1 }

// Finalize does nothing without MPI.
func (m *MPI) Finalize(bound time.Duration) error { return nil }
