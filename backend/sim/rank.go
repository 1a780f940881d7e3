package sim

import (
	"fmt"
	"math"

	"collbench/backend/sim/cluster"
	"collbench/dtype"
	"collbench/internal/reduce"
	"collbench/measure"
	"collbench/results"
)

// buffer is a modelled device buffer: Len bytes, of which data holds the
// first ones for real.
type buffer struct {
	n    int64
	data []byte
}

func (b *buffer) Len() int64 { return b.n }

// rank is one modelled GPU in one communicator.
type rank struct {
	w     *World
	g     *group
	rank  int
	world int
}

func (r *rank) Rank() int      { return r.rank }
func (r *rank) Size() int      { return len(r.g.members) }
func (r *rank) WorldRank() int { return r.world }

// Device names the modelled GPU.
func (r *rank) Device() results.Device {
	m := r.w.b.Net.Model()
	return results.Device{Rank: r.world, Name: m.GPU.Model, BusID: m.BusID(r.world % m.GPUsPerHost)}
}

func (r *rank) Alloc(bytes int64) (measure.Buffer, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("cannot allocate %d bytes", bytes)
	}
	return &buffer{n: bytes, data: make([]byte, min(bytes, r.w.hold))}, nil
}

func (r *rank) Free(measure.Buffer) error { return nil }

// held is the part of count elements of esz bytes at v that holds data.
func held(v measure.View, count int64, esz int) []byte {
	b := v.Buf.(*buffer)
	if v.Off >= int64(len(b.data)) {
		return nil
	}
	n := min(count*int64(esz), int64(len(b.data))-v.Off)
	n -= n % int64(esz)
	return b.data[v.Off : v.Off+n]
}

func (r *rank) Fill(dst measure.View, count int64, p measure.Pattern) error {
	b := held(dst, count, p.DType.Size())
	p.FillRange(b, 0, int64(len(b))/int64(p.DType.Size()))
	r.w.dev[r.world] += float64(count) / (r.w.b.Net.FillRate(r.world) * 1e3)
	return nil
}

func (r *rank) Poison(dst measure.View, count int64, t dtype.DType) error {
	b := held(dst, count, t.Size())
	v := byte(0x80)
	if t.IsFloat() {
		v = 0xff
	}
	for i := range b {
		b[i] = v
	}
	return nil
}

// want is the expected output for e's held elements. An allreduce's is
// the same on every rank and costs n per element, so the group computes
// it once.
func (r *rank) want(e measure.Expectation, k int64) []float64 {
	key := e
	if e.Coll == measure.AllReduce || e.Coll == measure.Broadcast {
		key.Rank = 0
	}
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if r.g.wants == nil {
		r.g.wants = map[measure.Expectation][]float64{}
	}
	if w, ok := r.g.wants[key]; ok && int64(len(w)) >= k {
		return w
	}
	w := make([]float64, k)
	for i := range w {
		w[i], _ = e.Want(int64(i))
	}
	r.g.wants[key] = w
	return w
}

func (r *rank) Check(src measure.View, e measure.Expectation) (int64, error) {
	r.w.clock[r.world] += r.w.b.Net.Model().Costs.MeasureS * 1e6
	b := held(src, e.OutputCount(), e.DType.Size())
	k := int64(len(b)) / int64(e.DType.Size())
	want := r.want(e, k)
	var wrong int64
	for i := int64(0); i < k; i++ {
		got := e.DType.Get(b, i)
		if got != got || !e.MatchesWant(want[i], got) {
			wrong++
		}
	}
	return wrong, nil
}

// FindMismatches lists wrong held elements.
func (r *rank) FindMismatches(src measure.View, e measure.Expectation, limit int) ([]results.Mismatch, error) {
	b := held(src, e.OutputCount(), e.DType.Size())
	return e.FindMismatchesAgainst(b, r.want(e, int64(len(b))/int64(e.DType.Size())), limit), nil
}

func (r *rank) Launch(c measure.Call) error {
	_, err := r.issue(c, 1)
	return err
}

// Repeat issues c n times: the data once, the time of all n.
func (r *rank) Repeat(c measure.Call, n int) error {
	_, err := r.issue(c, n)
	return err
}

// TimeEach returns each of iters operations' modelled times.
func (r *rank) TimeEach(c measure.Call, iters int) ([]float64, error) {
	return r.issue(c, iters)
}

func (r *rank) Sync() error { return nil }

// Barrier brings every rank of the world to the latest clock.
func (r *rank) Barrier() error {
	w := r.w
	return w.bar.meet(w, func() {
		latest := 0.0
		for _, c := range w.clock {
			latest = math.Max(latest, c)
		}
		for i := range w.clock {
			w.clock[i] = latest
		}
	})
}

// TimeOnDevice is the modelled device time of work.
func (r *rank) TimeOnDevice(work func() error) (float64, error) {
	d0 := r.w.dev[r.world]
	if err := work(); err != nil {
		return 0, err
	}
	return (r.w.dev[r.world] - d0) / 1e6, nil
}

// pattern is how the model costs c.
func pattern(c measure.Collective) cluster.Pattern {
	switch c {
	case measure.AllReduce:
		return cluster.Ring
	case measure.Broadcast:
		return cluster.Chain
	}
	return cluster.Shift
}

// times is what one operation of c takes on each group of the split.
func (s *split) times(c measure.Call, bytes int64) cluster.Times {
	key := costKey{pattern(c.Coll), bytes}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.costs[key]; ok {
		return t
	}
	t := s.w.b.Net.OpTimes(key.p, s.memberLists(), bytes)
	s.costs[key] = t
	return t
}

// issue meets the group for c issued n times: the last to arrive computes
// the data for every member and draws the n operations' times.
func (r *rank) issue(c measure.Call, n int) ([]float64, error) {
	if err := r.w.b.Supports(c.Coll, c.DType, c.Op); err != nil {
		return nil, err
	}
	g := r.g
	g.calls[r.rank] = c
	err := g.gate.meet(r.w, func() {
		g.compute()
		esz := int64(c.DType.Size())
		geom := measure.CallGeometry(c, len(g.members))
		bytes := geom.Count * esz
		t := g.s.times(c, bytes)
		w := r.w
		m := w.b.Net.Model()
		lead := g.members[0]
		start := 0.0
		for _, x := range g.members {
			start = math.Max(start, w.clock[x])
		}
		// A group on more than one host crosses the fabric (busy-fabric).
		across := false
		for _, x := range g.members {
			across = across || x/m.GPUsPerHost != lead/m.GPUsPerHost
		}
		g.times = make([]float64, n)
		total := 0.0
		for k := range g.times {
			w.ops[lead]++
			g.times[k] = m.Draw(t.US[g.idx], t.FlapUS[g.idx], t.Flaps[g.idx], uint64(lead), w.ops[lead]) //nolint:gosec // G115: a rank, never negative
			if across {
				g.times[k] /= m.Busy((start + total) / 1e6)
			}
			total += g.times[k]
		}
		for _, x := range g.members {
			w.clock[x] = start + total
			w.dev[x] += total
		}
		w.recordOp(g, c, bytes, start, total)
	})
	if err != nil {
		return nil, err
	}
	return append([]float64(nil), g.times...), nil
}

// compute does the group's operation on the held elements of every
// member's buffers. A member that returns wrong data changes the first
// element of what it delivers to the other members (its own output stays
// right: the fault is on its way out).
func (g *group) compute() {
	k := len(g.members)
	c := g.calls[0]
	esz := c.DType.Size()
	net := g.s.w.b.Net
	// Copies, so an in-place operation reads its inputs before any
	// member's output overwrites them.
	ins := make([][]byte, k)
	for i := range ins {
		ci := g.calls[i]
		ins[i] = append([]byte(nil), held(ci.Send, measure.CallGeometry(ci, k).SendCount, esz)...)
	}
	// out is what member i delivers to member j.
	out := func(i, j int) []byte {
		b := ins[i]
		if i != j && net.Wrong(g.members[i]) && len(b) >= esz {
			b = append([]byte(nil), b...)
			c.DType.Put(b, 0, c.DType.Get(b, 0)+1)
		}
		return b
	}
	recv := func(i int) []byte {
		ci := g.calls[i]
		return held(ci.Recv, measure.CallGeometry(ci, k).RecvCount, esz)
	}
	switch c.Coll {
	case measure.AllReduce:
		// What every member gets, from everyone's delivered inputs (j = -1:
		// to another member); a member that returns wrong data gets its
		// own, with its own input right.
		sum := func(j int) []byte {
			acc := append([]byte(nil), out(0, j)...)
			for i := 1; i < k; i++ {
				s := out(i, j)
				n := min(len(acc), len(s))
				reduce.Into(acc[:n], s[:n], c.DType, c.Op)
			}
			if c.Op == measure.Avg {
				reduce.Divide(acc, c.DType, k)
			}
			return acc
		}
		all := sum(-1)
		for j := 0; j < k; j++ {
			if net.Wrong(g.members[j]) {
				copy(recv(j), sum(j))
			} else {
				copy(recv(j), all)
			}
		}
	case measure.Broadcast:
		for j := 0; j < k; j++ {
			copy(recv(j), out(c.Root, j))
		}
	case measure.SendRecv:
		for i := 0; i < k; i++ {
			j := (i + 1) % k
			copy(recv(j), out(i, j))
		}
	}
}

// memberLists is every group's members by world rank.
func (s *split) memberLists() [][]int {
	groups := make([][]int, len(s.groups))
	for i, g := range s.groups {
		groups[i] = g.members
	}
	return groups
}
