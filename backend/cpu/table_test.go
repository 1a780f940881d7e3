package cpu

import (
	"testing"

	"collbench/measure"
)

// TestEveryCollectiveHasARow: the cpu backend runs every collective
// measure knows, each from its one row of ops (its algorithm's name, its
// run across processes and in one process); a collective added to measure
// without a row here fails.
func TestEveryCollectiveHasARow(t *testing.T) {
	for _, c := range measure.AllCollectives() {
		o, ok := ops[c]
		switch {
		case !ok:
			t.Errorf("%s: no row in the cpu backend's ops", c)
		case o.algo == nil || o.dist == nil || o.hub == nil:
			t.Errorf("%s: a row without its algorithm's name, its run across processes or its run in one process", c)
		case o.algo(&mesh{}, 1<<20, 4) == "":
			t.Errorf("%s: its algorithm has no name", c)
		}
	}
	if len(ops) != len(measure.AllCollectives()) {
		t.Errorf("ops has %d rows for %d collectives", len(ops), len(measure.AllCollectives()))
	}
}
