package watch

import (
	"cmp"
	"fmt"
	"slices"
)

// MaxOps bounds the kinds of operation a collector counts (communicator,
// function, type and count): a job issues tens; a bound keeps a stream of
// odd ones from growing the collector.
const MaxOps = 4096

// OpKey is one kind of operation a job issues.
type OpKey struct {
	Comm  uint64
	Ranks int
	Func  string
	DType string
	Count int64
}

// OpStat is how often a job issued one kind of operation: Calls are the
// operations its communicator's rank 0 reported, times the sample it sent
// at (an estimate where the senders sampled).
type OpStat struct {
	Comm  string `json:"communicator"`
	Ranks int    `json:"ranks"`
	Func  string `json:"func"`
	DType string `json:"dtype"`
	Count int64  `json:"count"`
	Calls uint64 `json:"calls"`
}

// countOp counts s's operation once per communicator: from its rank 0.
func (c *Collector) countOp(s Summary) {
	if s.Rank != 0 || s.Func == "" || s.Count <= 0 {
		return
	}
	k := OpKey{Comm: s.Comm, Ranks: s.Ranks, Func: s.Func, DType: s.DType, Count: s.Count}
	if c.ops == nil {
		c.ops = map[OpKey]uint64{}
	}
	if _, ok := c.ops[k]; !ok && len(c.ops) >= MaxOps {
		return
	}
	c.ops[k] += max(s.Every, 1)
}

// Ops lists what the job issued, most called first.
func (c *Collector) Ops() []OpStat {
	var out []OpStat
	for k, n := range c.ops {
		out = append(out, OpStat{Comm: fmt.Sprintf("%016x", k.Comm), Ranks: k.Ranks, Func: k.Func, DType: k.DType, Count: k.Count, Calls: n})
	}
	slices.SortFunc(out, func(a, b OpStat) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Func, b.Func), cmp.Compare(a.Count, b.Count), cmp.Compare(a.Comm, b.Comm))
	})
	return out
}
