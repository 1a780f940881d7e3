package cpu

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"collbench/measure"
)

// The algorithms the cpu backend can be told to run allreduce with across
// processes (collbench tune's space on this backend); the other
// collectives have one algorithm each.
const (
	algoRing              = "ring"
	algoRecursiveDoubling = "recursive_doubling"
)

var allReduceAlgos = []string{algoRing, algoRecursiveDoubling}

// forced holds the algorithm forced per collective in one process (every
// communicator of its world, split ones included); absent, the default
// rule chooses.
type forced struct {
	mu sync.RWMutex
	by map[measure.Collective]string
}

func (f *forced) get(c measure.Collective) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.by[c]
}

// allReduceAlgo is the algorithm an allreduce of n bytes on k ranks runs
// with: the forced one, else recursive doubling for small messages on
// more than recursiveMinRanks ranks and the ring otherwise.
func (m *mesh) allReduceAlgo(n int64, k int) string {
	if a := m.force.get(measure.AllReduce); a != "" {
		return a
	}
	if k > recursiveMinRanks && n <= smallAllReduce {
		return algoRecursiveDoubling
	}
	return algoRing
}

// Choices are the algorithms c can be forced to run with (measure.Forcer):
// allreduce's two across processes, none for the rest.
func (w *distWorld) Choices(c measure.Collective, ranks int) []string {
	if c == measure.AllReduce && ranks > 1 {
		return slices.Clone(allReduceAlgos)
	}
	return nil
}

// Force makes c run with algo from now on in this process, on every
// communicator; "" returns to the default rule (measure.Forcer).
func (w *distWorld) Force(c measure.Collective, algo string) error {
	if algo != "" && !slices.Contains(w.Choices(c, 2), algo) {
		return fmt.Errorf("the cpu backend cannot run %s with %q (it can: %s)", c, algo, strings.Join(append(w.Choices(c, 2), "its default"), ", "))
	}
	f := &w.m.force
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[measure.Collective]string{}
	}
	if algo == "" {
		delete(f.by, c)
	} else {
		f.by[c] = algo
	}
	return nil
}
