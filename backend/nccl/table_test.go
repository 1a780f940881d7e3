package nccl

import (
	"testing"

	"collbench/backend/nccl/driver"
	"collbench/measure"
)

// TestEveryCollectiveHasANCCLRow: the NCCL backend runs every collective
// measure knows from its one row of ops: one NCCL call, sends and receives
// in a group, or groups by rounds; a call the library may lack has its
// exchange beside it. A collective added to measure without a row fails.
func TestEveryCollectiveHasANCCLRow(t *testing.T) {
	for _, c := range measure.AllCollectives() {
		o, ok := ops[c]
		switch {
		case !ok:
			t.Errorf("%s: no row in the NCCL backend's ops", c)
		case o.call == 0 && o.exchange == nil && o.rounds == nil:
			t.Errorf("%s: a row with no NCCL call, no exchange and no rounds", c)
		case o.native != nil && o.exchange == nil:
			t.Errorf("%s: a library without %v has no exchange to run instead", c, o.call)
		case o.native != nil && !o.native(driver.Features{AllToAll: true, Gather: true}):
			t.Errorf("%s: a library with every call still runs the exchange", c)
		}
	}
	if len(ops) != len(measure.AllCollectives()) {
		t.Errorf("ops has %d rows for %d collectives", len(ops), len(measure.AllCollectives()))
	}
}
