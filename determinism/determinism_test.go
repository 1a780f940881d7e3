package determinism

import (
	"bytes"
	"math"
	"testing"
	"time"

	"collbench/dtype"
	"collbench/internal/golden"
	"collbench/tunefile"
)

func floats(t dtype.DType, v ...float64) []byte {
	b := make([]byte, len(v)*t.Size())
	for i, x := range v {
		t.Put(b, int64(i), x)
	}
	return b
}

func TestFirstDiffAndULPs(t *testing.T) {
	a := floats(dtype.Float32, 1, 2, 3)
	b := floats(dtype.Float32, 1, 2, float64(math.Nextafter32(3, 4)))
	if el, x := FirstDiff(dtype.Float32, a, b, 10); el != 12 || x != "0x00000001" {
		t.Fatalf("first diff %d %s", el, x)
	}
	if el, _ := FirstDiff(dtype.Float32, a, a, 0); el != -1 {
		t.Fatalf("equal outputs differ at %d", el)
	}
	// One ulp above 3, and across zero: -tiny to +tiny is 2 ulps apart.
	if u := ULPs(dtype.Float32, b, []float64{1, 2, 3}); u != 1 {
		t.Fatalf("ulps %d, want 1", u)
	}
	tiny := float64(math.SmallestNonzeroFloat32)
	if u := ULPs(dtype.Float32, floats(dtype.Float32, -tiny), []float64{tiny}); u != 2 {
		t.Fatalf("across zero: %d ulps, want 2", u)
	}
	if u := ULPs(dtype.BFloat16, floats(dtype.BFloat16, 1), []float64{1}); u != 0 {
		t.Fatalf("bf16 equal: %d", u)
	}
	if u := ULPs(dtype.Int32, floats(dtype.Int32, 1), []float64{2}); u != 0 {
		t.Fatalf("an integer type has no ulps: %d", u)
	}
}

// TestReportMatrixAndTunerFile renders a report of two choices, one of them
// size-variant, as text (golden), and pins the stable one in the file.
func TestReportMatrixAndTunerFile(t *testing.T) {
	r := &Report{Schema: Schema, Backend: "cpu", Ranks: 4, Runs: 3, Seed: 7, Started: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Complete: true}
	for _, s := range []int64{8, 512, 4096} {
		for _, ch := range []string{Default, "ring", "recursive_doubling"} {
			c := Cell{Collective: "allreduce", DType: "float", Size: s, Choice: ch, Runs: 3, RunToRun: Same, Ranks: Same, SizeInvariant: Same,
				Digest: "ring", TimeUS: 10, MaxULP: 1}
			if s == 8 {
				c.SizeInvariant = NA
			}
			if ch == "recursive_doubling" {
				c.Digest, c.TimeUS = "rd", 12
			} else if s > 8 {
				c.SizeInvariant = Differs
				c.Divergences = []Divergence{{Check: "size", Run: 1, Rank: 0, Element: s / 8, Bits: "0x00000002"}}
			}
			r.Cells = append(r.Cells, c)
		}
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "matrix.golden", out.Bytes())
	es, none := r.TunerEntries(tunefile.CPU)
	if len(none) != 0 || len(es) != 2 || es[0].Algorithm != "recursive_doubling" || es[0].MinBytes != 9 || es[1].MaxBytes != 4096 {
		t.Fatalf("entries %+v, none %v: want recursive doubling pinned from 9 B to 4 KiB and nothing at 8 B (the default is stable and fastest)", es, none)
	}
}
