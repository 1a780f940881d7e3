package measure

import (
	"strings"
	"testing"

	"collbench/results"
)

// stableWorld is a World of several processes whose Control hands back
// rank 0's word on AllGather, as a real one would.
type stableWorld struct {
	World
	rank0 byte
}

func (w stableWorld) Control() Control { return stableControl{rank0: w.rank0} }

type stableControl struct {
	Control
	rank0 byte
}

// A follower (rank 1 of 2) whose rank 0 says stop when rank0 is 1.
func (c stableControl) Rank() int { return 1 }
func (c stableControl) Size() int { return 2 }

func (c stableControl) AllGather(mine []byte) ([][]byte, error) {
	return [][]byte{[]byte(map[byte]string{0: "false", 1: "true"}[c.rank0]), mine}, nil
}

// TestStableCycles: a sweep repeated until stable ends after the least
// cycles when rows hold still, once they settle when they do, runs to its
// bound when a row keeps drifting or flips between two speeds, and says
// so; a process other than rank 0 follows rank 0's word.
func TestStableCycles(t *testing.T) {
	row := func(us float64) results.Row {
		return results.Row{SizeBytes: 1 << 20, OutOfPlace: &results.Half{TimeUS: us}, InPlace: &results.Half{TimeUS: us * 1.01}}
	}
	run := func(w World, times []float64) (int, string) {
		rn := &Runner{w: w}
		prev := make([][]float64, 1)
		var seen []results.Row
		for k, us := range times {
			seen = append(seen, row(us))
			rows := []results.Row{mergeCycles(seen)}
			stop, err := rn.settled(rows, prev, k+1, len(times))
			if err != nil {
				t.Fatal(err)
			}
			if stop {
				return k + 1, rn.StableNote
			}
		}
		return len(times), rn.StableNote
	}
	for _, c := range []struct {
		name  string
		times []float64
		want  int
		note  string
	}{
		{"still", []float64{100, 100.5, 99.8, 100, 100, 100, 100, 100, 100, 100}, StableMinCycles, "stable after 3 cycles"},
		{"settles late", []float64{100, 200, 300, 300, 300, 300, 300, 300, 300, 300}, 7, "stable after 7 cycles"},
		// A host that flips between two speeds moves the median each cycle.
		{"two states", []float64{100, 140, 100, 140, 100, 140, 100, 140, 100, 140}, StableMaxCycles, "not stable after 10 cycles, the bound"},
		{"drifting", []float64{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}, StableMaxCycles, "not stable after 10 cycles, the bound"},
	} {
		if got, note := run(nil, c.times); got != c.want || !strings.HasPrefix(note, c.note) {
			t.Errorf("%s: ended after %d cycles (%q), want %d (%q)", c.name, got, note, c.want, c.note)
		}
	}
	// Rank 0 holds every rank's figures: a process whose own rows drift
	// stops when rank 0 says stable, and goes on when rank 0 does not.
	drift := []float64{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}
	if got, _ := run(stableWorld{rank0: 1}, drift); got != 1 {
		t.Errorf("rank 0 says stable: this process ran %d cycles, want 1", got)
	}
	if got, _ := run(stableWorld{rank0: 0}, []float64{100, 100, 100, 100, 100}); got != 5 {
		t.Errorf("rank 0 says not stable: this process ran %d cycles, want 5", got)
	}
}
