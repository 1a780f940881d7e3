package report

import (
	"strings"
	"testing"
	"time"

	"collbench/measure"
)

func TestProgressLine(t *testing.T) {
	ev := measure.Progress{Done: 5, Total: 20, Case: measure.Case{Coll: measure.AllGather, DType: 7, Op: measure.NoOp}, Size: 64 << 20}
	got := ProgressLine(ev, 30*time.Second)
	if got != "[#####...............] 6/20 allgather float none 64 MiB, ETA 30s" {
		t.Fatalf("%q", got)
	}
	if got := ProgressLine(ev, -1); !strings.HasSuffix(got, "ETA --") {
		t.Fatalf("%q", got)
	}
}
