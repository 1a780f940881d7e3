package watch

import "sort"

// The verdict on one complete operation: which rank came last, by how
// much, and why, by kernel starts or by kernel durations.

// judge records one complete operation: the rank that started last is
// late when it started after the next latest by more than MinLate (and
// the clocks' errors, where starts are compared). Then it names or clears
// ranks by their history in the operations of its function.
func (c *Collector) judge(id uint64, cm *comm, seq uint64, all []*Summary) []Finding {
	k := clocksOf(all)
	var v lateness
	if waitsForAll(all) {
		v = c.byDuration(all, k)
	} else {
		v = c.byStart(all, k)
	}
	var out []Finding
	fh := cm.history(all[0].Func)
	for r := range all {
		o := outcome{seq: seq}
		if r == v.rank {
			o = outcome{seq: seq, late: v.late, by: v.by, issue: v.issue}
		}
		h := append(fh.hist[r], o)
		if len(h) > c.o.Window {
			h = h[len(h)-c.o.Window:]
		}
		fh.hist[r] = h
		if f := c.update(id, cm, fh, r, all[r].StartNS); f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// lateness is one operation's verdict: the rank that started last, by how
// much after the next latest, whether that counts, and whether it issued
// late as well.
type lateness struct {
	rank        int
	by          int64
	late, issue bool
}

// clocks says how one operation's ranks' times compare: on their own
// clock where they share it, else on the collector's where every rank
// knows its offset from it (move); otherwise only ranks on one clock.
type clocks struct{ move bool }

func clocksOf(all []*Summary) clocks {
	shared, synced := true, true
	for _, s := range all {
		shared = shared && s.Clock == all[0].Clock
		synced = synced && s.Synced
	}
	return clocks{move: !shared && synced}
}

// at is s's time t on the clock the operation is compared on.
func (k clocks) at(s *Summary, t int64) int64 {
	if k.move {
		return t + s.OffsetNS
	}
	return t
}

// err is the error of s's times on that clock.
func (k clocks) err(s *Summary) int64 {
	if k.move {
		return s.ErrNS + s.OffsetErrNS
	}
	return s.ErrNS
}

// comparable says whether a's and b's times can be compared.
func (k clocks) comparable(a, b *Summary) bool { return k.move || a.Clock == b.Clock }

// byStart is the verdict by kernel starts: the rank whose kernel started
// last is late by how far after the next latest's it started, beyond both
// clocks' errors and MinLate.
func (c *Collector) byStart(all []*Summary, k clocks) lateness {
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		return k.at(all[idx[a]], all[idx[a]].StartNS) > k.at(all[idx[b]], all[idx[b]].StartNS)
	})
	last, next := all[idx[0]], all[idx[1]]
	by := k.at(last, last.StartNS) - k.at(next, next.StartNS)
	errs := k.err(last) + k.err(next)
	return c.issued(last, next, k, lateness{rank: idx[0], by: by, late: k.comparable(last, next) && by > errs+c.o.MinLate.Nanoseconds()}, errs)
}

// waitsForAll says whether every summary of the operation carries its
// kernel's times, of a collective in which every rank waits for every
// other's data (so the kernels end together, and the one that started
// last ran shortest).
func waitsForAll(all []*Summary) bool {
	switch all[0].Func {
	case "AllReduce", "AllGather", "ReduceScatter":
	default:
		return false
	}
	for _, s := range all {
		if !s.Kernel || s.EndNS <= s.StartNS || s.Func != all[0].Func {
			return false
		}
	}
	return true
}

// byDuration is the verdict by kernel durations, each on one GPU's own
// timer, so no clock's alignment enters it: the peers of a rank that
// started late waited for it inside their kernels, so it ran shortest, by
// how late it came. A GPU that another program time-slices holds its
// kernels back behind the other's work; its timer's alignment to the
// host's clock then widens (each operation starts long after its issue),
// and by starts that width hid it (4x H200: a copy loop named in 4 of 8
// runs).
func (c *Collector) byDuration(all []*Summary, k clocks) lateness {
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	dur := func(i int) int64 { return all[i].EndNS - all[i].StartNS }
	sort.Slice(idx, func(a, b int) bool { return dur(idx[a]) < dur(idx[b]) })
	by := dur(idx[1]) - dur(idx[0])
	return c.issued(all[idx[0]], all[idx[1]], k, lateness{rank: idx[0], by: by, late: by > c.o.MinLate.Nanoseconds()}, 0)
}

// issued completes v, of last against next: where last's issue came after
// next's by most of its lateness (its host or process is slow), only a
// lateness beyond errs and MinIssueLate counts. Where their issues cannot
// be compared (clocks apart), the same floor holds, as either cause may
// be.
func (c *Collector) issued(last, next *Summary, k clocks, v lateness, errs int64) lateness {
	if !v.late {
		return v
	}
	v.issue = !k.comparable(last, next) || k.at(last, last.IssueNS)-k.at(next, next.IssueNS) > v.by/2
	if v.issue && v.by <= errs+c.o.MinIssueLate.Nanoseconds() {
		v.late, v.issue = false, false
	}
	if !k.comparable(last, next) {
		v.issue = false // a cause that cannot be told is its GPU's start, as seen
	}
	return v
}
