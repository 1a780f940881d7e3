package cpu

import (
	"collbench/measure"
	"collbench/results"
)

// cpuSource is how rows name where the cpu backend's algorithm comes from.
const cpuSource = "cpu backend"

// Algorithm names what the ranks of one process do: they meet in shared
// memory, each reduces or copies its share straight from the others'
// buffers (DIRECT), with no protocol between them.
func (w *world) Algorithm(c measure.Collective, bytes int64, ranks int) *results.AlgoChoice {
	if ranks < 2 {
		return nil
	}
	return &results.AlgoChoice{Algo: "DIRECT", Proto: "SHM", Source: cpuSource}
}

// Algorithm names the algorithm of algo.go a collective runs with across
// processes, over TCP.
func (w *distWorld) Algorithm(c measure.Collective, bytes int64, ranks int) *results.AlgoChoice {
	if ranks < 2 {
		return nil
	}
	o, ok := ops[c]
	if !ok {
		return nil
	}
	return &results.AlgoChoice{Algo: o.algo(w.m, bytes, ranks), Proto: "TCP", Source: cpuSource}
}
