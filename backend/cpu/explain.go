package cpu

import (
	"collbench/results"
	"collbench/suites"
)

// cpuSource is how rows name where the cpu backend's algorithm comes from.
const cpuSource = "cpu backend"

// Algorithm names what the ranks of one process do: they meet in shared
// memory, each reduces or copies its share straight from the others'
// buffers (DIRECT), with no protocol between them.
func (w *world) Algorithm(c suites.Collective, bytes int64, ranks int) *results.AlgoChoice {
	if ranks < 2 {
		return nil
	}
	return &results.AlgoChoice{Algo: "DIRECT", Proto: "SHM", Source: cpuSource}
}

// Algorithm names the algorithm of algo.go a collective runs with across
// processes, over TCP.
func (w *distWorld) Algorithm(c suites.Collective, bytes int64, ranks int) *results.AlgoChoice {
	if ranks < 2 {
		return nil
	}
	a := &results.AlgoChoice{Proto: "TCP", Source: cpuSource}
	switch c {
	case suites.AllReduce:
		a.Algo = "RING"
		if ranks > recursiveMinRanks && bytes <= smallAllReduce {
			a.Algo = "RECURSIVE_DOUBLING"
		}
	case suites.ReduceScatter, suites.AllGather:
		a.Algo = "RING"
	case suites.Broadcast, suites.Reduce:
		a.Algo = "CHAIN"
	case suites.AllToAll, suites.AllToAllV:
		a.Algo = "PAIRWISE"
	case suites.SendRecv:
		a.Algo = "P2P"
	case suites.Gather, suites.Scatter:
		a.Algo = "DIRECT"
	case suites.HyperCube:
		a.Algo = "RECURSIVE_DOUBLING"
	default:
		return nil
	}
	return a
}
