package watch

import (
	"fmt"
	"slices"
	"sort"
)

// Link is what one rank sent one peer in one operation: the bytes, and
// the time they spent on the wire, from when they were handed to the
// transport until it was done with them (not the time spent waiting for
// the peer to be ready, which a slow peer, not a slow link, causes).
type Link struct {
	Peer   int // the peer's rank in the communicator
	Bytes  int64
	WireNS int64
}

// linkKey is one direction of one link of a communicator; with to = -1,
// every link to and from rank from (an end).
type linkKey struct{ from, to int }

// linkState is what the collector holds of one direction of a link: its
// last outcomes and the finding that stands, if any.
type linkState struct {
	hist    []linkOutcome
	named   *Finding
	pending onset
}

// linkOutcome is one link's part in one judged operation.
type linkOutcome struct {
	seq          uint64
	slow         bool
	below        bool    // below LinkShare of the median, whatever its ends did
	rate, median float64 // bytes per second
}

// judgeLinks judges the links of one complete operation: each direction
// that moved at least MinLinkBytes is slow when its rate on the wire is
// below LinkShare of the operation's median link's. At least three links
// must have moved that much, so there is a median to be slower than.
// Then it names or clears links as update does ranks.
func (c *Collector) judgeLinks(id uint64, cm *comm, seq uint64, all []*Summary) []Finding {
	if !slices.ContainsFunc(all, func(s *Summary) bool { return len(s.Links) > 0 }) {
		return nil // most operations carry none: nothing to allocate
	}
	moved := map[linkKey]Link{}
	for _, s := range all {
		for _, l := range s.Links {
			if l.Peer < 0 || l.Peer >= cm.ranks || l.Peer == s.Rank || l.WireNS <= 0 {
				continue
			}
			k := linkKey{s.Rank, l.Peer}
			sum := moved[k]
			sum.Peer, sum.Bytes, sum.WireNS = l.Peer, sum.Bytes+l.Bytes, sum.WireNS+l.WireNS
			moved[k] = sum
		}
	}
	rates := map[linkKey]float64{}
	for k, l := range moved {
		if l.Bytes >= c.o.MinLinkBytes {
			rates[k] = float64(l.Bytes) / (float64(l.WireNS) / 1e9)
		}
	}
	if len(rates) < 3 {
		return nil
	}
	rs := make([]float64, 0, len(rates))
	for _, r := range rates {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	median := rs[len(rs)/2]
	slowAt := func(k linkKey) bool { return rates[k] < c.o.LinkShare*median }
	// A rank all of whose links (two or more, to and from it) are slow is
	// the slow part, not its links: a slow GPU or host slows what it sends
	// and what it takes in alike. Its links' outcomes go to it.
	type ends struct{ judged, slow int }
	touch := map[int]ends{}
	for k := range rates {
		for _, r := range []int{k.from, k.to} {
			e := touch[r]
			e.judged++
			if slowAt(k) {
				e.slow++
			}
			touch[r] = e
		}
	}
	slowEnd := func(r int) bool { e := touch[r]; return e.judged >= 2 && e.slow == e.judged }
	endRate := map[int][]float64{}
	keys := make([]linkKey, 0, len(rates)+len(touch))
	for k := range rates {
		keys = append(keys, k)
		endRate[k.from] = append(endRate[k.from], rates[k])
		endRate[k.to] = append(endRate[k.to], rates[k])
	}
	for r, e := range touch {
		if e.judged >= 2 {
			keys = append(keys, linkKey{r, -1})
		}
	}
	// Ends first, so that a link's outcome below sees its ends' histories
	// with this operation in them.
	sort.Slice(keys, func(a, b int) bool {
		if ea, eb := keys[a].to < 0, keys[b].to < 0; ea != eb {
			return ea
		}
		if keys[a].from != keys[b].from {
			return keys[a].from < keys[b].from
		}
		return keys[a].to < keys[b].to
	})
	var out []Finding
	for _, k := range keys {
		st := cm.links[k]
		if st == nil {
			if c.nlinks >= c.o.MaxLinks {
				continue // bounded: a link first seen beyond the cap is not followed
			}
			st = &linkState{}
			cm.links[k] = st
			c.nlinks++
		}
		var o linkOutcome
		if k.to < 0 {
			rs := endRate[k.from]
			slices.Sort(rs)
			o = linkOutcome{seq: seq, slow: slowEnd(k.from), rate: rs[len(rs)/2], median: median}
		} else {
			c.linked++
			o = linkOutcome{seq: seq, below: slowAt(k), rate: rates[k], median: median}
			below := 0
			if o.below {
				below++
			}
			for _, h := range st.hist {
				if h.below {
					below++
				}
			}
			o.slow = o.below && !c.endHeld(cm, k.from, below) && !c.endHeld(cm, k.to, below)
		}
		st.hist = append(st.hist, o)
		if len(st.hist) > c.o.Window {
			st.hist = st.hist[len(st.hist)-c.o.Window:]
		}
		if f := c.updateLink(id, cm, k, st, all[k.from].StartNS); f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// endHeld says whether rank r is held to be the slow part of a link that
// was below the median's share in below of its last operations: every
// link to and from r was slow in at least half as many, and in at least
// half of Share of the operations r's history holds. A slow GPU or host
// slows all its links in nearly every operation, as often as any one of
// them; a slow link leaves its ends' other links healthy, save when they
// stall by chance. Judged over the window, not one operation, so that in
// a ring, where each rank has two links, a stall of a slow link's
// neighbour does not take the link's outcome from it.
func (c *Collector) endHeld(cm *comm, r, below int) bool {
	st := cm.links[linkKey{r, -1}]
	if st == nil || len(st.hist) == 0 {
		return false
	}
	slow := 0
	for _, o := range st.hist {
		if o.slow {
			slow++
		}
	}
	return 2*slow >= below && float64(slow) >= c.o.Share/2*float64(len(st.hist))
}

// updateLink names a link slow in Share of a full window of the
// operations it moved enough in for Persist up to now (the time of its
// sender's operation just judged), and clears it when that falls below
// half of Share.
func (c *Collector) updateLink(id uint64, cm *comm, k linkKey, st *linkState, now int64) *Finding {
	var slow int
	var rates, medians []float64
	for _, o := range st.hist {
		if o.slow {
			slow++
			rates = append(rates, o.rate)
			medians = append(medians, o.median)
		}
	}
	name, clear := c.verdict(st.named != nil, slow, len(st.hist), &st.pending, now, func() uint64 { return sinceSlow(st.hist) })
	switch {
	case name:
		slices.Sort(rates)
		slices.Sort(medians)
		from := cm.who[k.from]
		f := &Finding{Comm: id, Rank: k.from, Host: from.Host, GPU: from.GPU, Cause: CauseLink,
			Link: &LinkFinding{Peer: k.to, Rate: rates[len(rates)/2], Median: medians[len(medians)/2]},
			Late: slow, Of: len(st.hist), SinceSeq: st.pending.since}
		if k.to < 0 {
			f.Cause = CauseEnd
		} else {
			f.Link.PeerHost, f.Link.PeerGPU = cm.who[k.to].Host, cm.who[k.to].GPU
		}
		st.named = f
		return f
	case clear:
		f := *st.named
		st.named = nil
		f.Cleared, f.ClearedSeq = true, st.hist[len(st.hist)-1].seq
		return &f
	}
	return nil
}

// sinceSlow is where a link's slow run began, as since is for a rank.
func sinceSlow(h []linkOutcome) uint64 {
	return runStart(h, func(o linkOutcome) (bool, uint64) { return o.slow, o.seq })
}

// LinkFinding is what a finding of a slow link adds: the peer the rank
// sends to over it, and the link's median rate over its slow operations
// against the median link's in them. Peer is -1 where every link to and
// from the rank is slow (CauseEnd), and Rate is then its links' median.
type LinkFinding struct {
	Peer              int
	PeerHost, PeerGPU string
	Rate, Median      float64 // bytes per second
}

// rate says a rate in bytes per second as a person reads it.
func rate(bps float64) string {
	switch {
	case bps >= 999.5e6:
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	}
	return fmt.Sprintf("%.0f kB/s", bps/1e3)
}

// linkString is a link finding as collbench watch prints it.
func (f Finding) linkString() string {
	l := f.Link
	if l.Peer < 0 {
		where := fmt.Sprintf("rank %d (%s)", f.Rank, place(f.Host, f.GPU))
		if f.Cleared {
			return fmt.Sprintf("cleared: %s on communicator %016x: its links are no longer all slow, from operation %d", where, f.Comm, f.ClearedSeq)
		}
		return fmt.Sprintf("%s on communicator %016x: %s, %s where the median link sends %s, in %d of its last %d operations, since operation %d",
			where, f.Comm, f.Cause, rate(l.Rate), rate(l.Median), f.Late, f.Of, f.SinceSeq)
	}
	where := fmt.Sprintf("link from rank %d (%s) to rank %d (%s)", f.Rank, place(f.Host, f.GPU), l.Peer, place(l.PeerHost, l.PeerGPU))
	if f.Cleared {
		return fmt.Sprintf("cleared: %s on communicator %016x is no longer slow, from operation %d", where, f.Comm, f.ClearedSeq)
	}
	return fmt.Sprintf("%s on communicator %016x: %s, %s where the median link sends %s, in %d of its last %d operations, since operation %d",
		where, f.Comm, f.Cause, rate(l.Rate), rate(l.Median), f.Late, f.Of, f.SinceSeq)
}

// place is a rank's host, and its GPU where known.
func place(host, gpu string) string {
	if gpu == "" {
		return host
	}
	return host + ", GPU " + gpu
}

// MinLinkBytesDefault is the least a link must move in an operation to be
// judged: below it, a send's time is its latency, not its rate.
const MinLinkBytesDefault = 64 << 10

// linkConfirm is the doctor command that would confirm a slow link once
// its hosts are drained.
func (f Finding) linkConfirm() string {
	l := f.Link
	if l.PeerHost == f.Host {
		return fmt.Sprintf("on %s, once drained: collbench doctor -o doctor-%s.json (times every path between its GPUs, %s's and %s's among them)",
			f.Host, f.Host, orRank(f.GPU, f.Rank), orRank(l.PeerGPU, l.Peer))
	}
	return fmt.Sprintf("on %s and %s, once drained: collbench doctor -o doctor-%s-%s.json under the launcher, one process per GPU of the two hosts (times every path between them, and each NIC)",
		f.Host, l.PeerHost, f.Host, l.PeerHost)
}

func orRank(gpu string, rank int) string {
	if gpu != "" {
		return "GPU " + gpu
	}
	return fmt.Sprintf("rank %d", rank)
}

// standingLinks are the link findings that stand on cm.
func (cm *comm) standingLinks() []Finding {
	var out []Finding
	for _, st := range cm.links {
		if st.named != nil {
			out = append(out, *st.named)
		}
	}
	return out
}
