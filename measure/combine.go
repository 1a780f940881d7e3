package measure

import (
	"encoding/json"
	"fmt"

	"collbench/results"
)

// groupHalves combines every rank's results (by world rank) into each
// group's half of the row and the algorithm each group's library chose.
func (rn *Runner) groupHalves(all []rankResult, c Case, size int64) ([]*results.Half, []*results.AlgoChoice) {
	p, esz := rn.Plan, c.DType.Size()
	var hs []*results.Half
	algos := make([]*results.AlgoChoice, len(rn.layout.Groups))
	for gi, members := range rn.layout.Groups {
		var gt []float64
		var gs [][]float64
		h := &results.Half{}
		var wrong int64
		for _, wr := range members {
			rr := all[wr]
			gt = append(gt, rr.Time)
			if rr.Samples != nil {
				gs = append(gs, rr.Samples)
			}
			wrong += rr.Wrong
			h.Mismatches = append(h.Mismatches, rr.Bad...)
		}
		h.RankTimeUS = gt
		if p.CPUTime {
			var cs []float64
			for _, wr := range members {
				cs = append(cs, all[wr].CPU)
			}
			h.CPUTimeUS = AvgMean.Combine(cs)
		}
		for _, wr := range members {
			if rr := all[wr]; rr.Sent > 0 || rr.Recv > 0 {
				h.RankBytesSent, h.RankBytesRecv = rankBytes(all, members)
				break
			}
		}
		h.TimeUS = p.Average.Combine(gt)
		h.Iter = iterStats(gs)
		if h.TimeUS > 0 && rn.hasBandwidth(members) {
			h.AlgBW, h.BusBW = Bandwidths(c.Coll, size, esz, len(members), h.TimeUS)
		}
		if p.Check > 0 {
			h.Wrong = &wrong
		}
		if p.Bitwise > 0 {
			h.Bitwise = groupBits(all, members, c.Coll, c.DType, p.Bitwise)
		}
		h.Kernels, algos[gi] = kernelTimes(all, members, rn.clocks)
		hs = append(hs, h)
	}
	return hs, algos
}

// rankResult is what one rank measured in one half.
type rankResult struct {
	WorldRank int                `json:"r"`
	Time      float64            `json:"t"`
	Wrong     int64              `json:"w"`
	Samples   []float64          `json:"s,omitempty"`
	Bad       []results.Mismatch `json:"b,omitempty"`
	Sent      int64              `json:"bs,omitempty"`
	Recv      int64              `json:"br,omitempty"`
	CPU       float64            `json:"c,omitempty"`
	Rec       *results.OpRecord  `json:"k,omitempty"`
	Bits      *rankBits          `json:"x,omitempty"`
}

// rankBytes lists the members' bytes per operation, in group-rank order.
func rankBytes(all []rankResult, members []int) (sent, recvd []int64) {
	for _, wr := range members {
		sent = append(sent, all[wr].Sent)
		recvd = append(recvd, all[wr].Recv)
	}
	return sent, recvd
}

// gather returns every rank's result by world rank: from this process
// alone, or, on rank 0 of a distributed world, from every process (the
// other processes know only their own; they print nothing).
func (rn *Runner) gather(mine []rankResult, n int) ([]rankResult, error) {
	all := make([]rankResult, n)
	put := func(rs []rankResult) error {
		for _, r := range rs {
			if r.WorldRank < 0 || r.WorldRank >= n {
				return fmt.Errorf("result from rank %d outside the world of %d", r.WorldRank, n)
			}
			all[r.WorldRank] = r
		}
		return nil
	}
	d, ok := rn.w.(Distributed)
	if !ok || d.Control() == nil {
		return all, put(mine)
	}
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	parts, err := d.Control().Gather(b)
	if err != nil {
		return nil, fmt.Errorf("gathering results: %w", err)
	}
	if parts == nil {
		return all, put(mine)
	}
	for _, part := range parts {
		var rs []rankResult
		if err := json.Unmarshal(part, &rs); err != nil {
			return nil, fmt.Errorf("gathering results: %w", err)
		}
		if err := put(rs); err != nil {
			return nil, err
		}
	}
	return all, nil
}
