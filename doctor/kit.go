package doctor

import (
	"fmt"
	"strings"
)

// The search's kit: what more than one stage reads, so that no stage file
// names another's identifiers (TestStageFilesNameOnlyTheirOwn): pair keys,
// a rank's GPU health, the NICs' peak, and how often a suspect is
// measured again before it is named.

// pairKey orders a pair.
func pairKey(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

// parsePair reads a pair back from its key ("a-b").
func parsePair(key string) [2]int {
	var a, b int
	_, _ = fmt.Sscanf(key, "%d-%d", &a, &b) // pairKey makes every key: two ranks
	return [2]int{a, b}
}

// touches says whether pair p shares a rank with a pair of round.
func touches(round [][2]int, p [2]int) bool {
	for _, q := range round {
		if q[0] == p[0] || q[0] == p[1] || q[1] == p[0] || q[1] == p[1] {
			return true
		}
	}
	return false
}

// nicPeak is the slowest active InfiniBand/RoCE port's rate in GB/s over
// every host's facts, 0 when unknown.
func (d *search) nicPeak() float64 {
	peak := 0.0
	for _, f := range d.o.Facts {
		for _, n := range f.NICs {
			if n.Kind != "ethernet" && n.RateGbps > 0 && strings.EqualFold(n.State, "ACTIVE") {
				if r := n.RateGbps / 8; peak == 0 || r < peak {
					peak = r
				}
			}
		}
	}
	return peak
}

// confirmAttempts is how often a suspect is measured again before it is
// named; one attempt that is not slow clears it.
const confirmAttempts = 3

// health is the NVML health of the GPU rank r drives, where the host's
// facts have it.
func (d *search) health(r int) (GPUHealth, bool) {
	f := d.facts[d.host(r)]
	if f == nil {
		return GPUHealth{}, false
	}
	idx, ok := d.devIndex[r]
	if !ok {
		return GPUHealth{}, false
	}
	for _, g := range f.GPUs {
		if g.Index == idx {
			return g, true
		}
	}
	return GPUHealth{}, false
}
