package cpu

import (
	"strings"

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
	a := &results.AlgoChoice{Proto: "TCP", Source: cpuSource}
	switch c {
	case measure.AllReduce:
		a.Algo = strings.ToUpper(w.m.allReduceAlgo(bytes, ranks))
	case measure.ReduceScatter, measure.AllGather:
		a.Algo = "RING"
	case measure.Broadcast, measure.Reduce:
		a.Algo = "CHAIN"
	case measure.AllToAll, measure.AllToAllV:
		a.Algo = "PAIRWISE"
	case measure.SendRecv:
		a.Algo = "P2P"
	case measure.Gather, measure.Scatter:
		a.Algo = "DIRECT"
	case measure.HyperCube:
		a.Algo = "RECURSIVE_DOUBLING"
	default:
		return nil
	}
	return a
}
