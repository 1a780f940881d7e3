package mpi

import "collbench/internal/faults"

// Options tune the backend.
type Options struct {
	// MemoryLimit caps the bytes this process's rank may allocate; 0 means
	// three quarters of the memory the system reports available, shared by
	// the collbench processes of the host.
	MemoryLimit int64
	// Faults are planted faults (tests and drills): hang, kill and stop.
	Faults *faults.Set
}
