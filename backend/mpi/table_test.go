//go:build mpi

package mpi

import (
	"testing"

	"collbench/measure"
)

// TestEveryCollectiveHasAnMPIRow: the MPI backend's table (the call each
// collective is, by its name in errors and its code in the C loop) has a
// row for every collective measure knows.
func TestEveryCollectiveHasAnMPIRow(t *testing.T) {
	for _, c := range measure.AllCollectives() {
		if _, ok := mpiNames[c]; !ok {
			t.Errorf("%s: no MPI call named", c)
		}
		if _, ok := collCodes[c]; !ok {
			t.Errorf("%s: no code for the C loop", c)
		}
	}
}
