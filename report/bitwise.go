package report

import (
	"fmt"
	"io"

	"collbench/internal/words"
	"collbench/results"
)

// maxBitLines is the most divergences a table lists; the JSON has each.
const maxBitLines = 8

// writeBitwise writes a collective's --bitwise line and its first
// divergences; nothing where --bitwise did not run.
func writeBitwise(w io.Writer, rows []results.Row) {
	halves, runs := 0, 0
	type diff struct {
		r    results.Row
		mode string
		b    *results.Bitwise
	}
	var diffs []diff
	for _, r := range rows {
		for _, m := range []struct {
			name string
			h    *results.Half
		}{{"out-of-place", r.OutOfPlace}, {"in-place", r.InPlace}} {
			if m.h == nil || m.h.Bitwise == nil {
				continue
			}
			halves++
			runs = max(runs, m.h.Bitwise.Runs)
			if !m.h.Bitwise.Same {
				diffs = append(diffs, diff{r, m.name, m.h.Bitwise})
			}
		}
	}
	if halves == 0 {
		return
	}
	if len(diffs) == 0 {
		fmt.Fprintf(w, "# bitwise:           the same bits in %d runs of each of %d halves, run to run and across ranks (OK)\n", runs, halves)
		return
	}
	fmt.Fprintf(w, "# bitwise:           other bits in %d of %d halves (%d runs each) (FAILED)\n", len(diffs), halves, runs)
	for i, d := range diffs {
		if i == maxBitLines {
			fmt.Fprintf(w, "# bitwise differs:   and %d more (in the JSON output)\n", len(diffs)-i)
			break
		}
		fmt.Fprintf(w, "# bitwise differs:   %s %s %s size %s %s: %s (seed %d)\n",
			d.r.Collective, d.r.DType, d.r.Op, words.Bytes(d.r.SizeBytes), d.mode, divergenceWords(d.b.First), d.b.Seed)
	}
}

// divergenceWords says where two outputs first differ.
func divergenceWords(f *results.BitDivergence) string {
	if f == nil {
		return "differs"
	}
	if f.Check == "ranks" {
		if f.Element < 0 {
			return fmt.Sprintf("rank %d's output is not rank %d's", f.Rank, f.Other)
		}
		return fmt.Sprintf("rank %d's element %d is not rank %d's (bits XOR %s)", f.Rank, f.Element, f.Other, f.XOR)
	}
	return fmt.Sprintf("run %d on rank %d differs from run 1 from element %d (bits XOR %s)", f.Run, f.Rank, f.Element, f.XOR)
}
