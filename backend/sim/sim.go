// Package sim is the simulated backend: every rank of a modelled cluster
// (package cluster) in one process. Data is computed for real on the first
// elements of every buffer (Hold bytes of each), so verification and
// wrong-data faults work; time comes from the model, so a doctor run on
// 8,192 modelled GPUs says what its rounds would take on the real cluster.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"collbench/backend/sim/cluster"
	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
)

// DefaultHold is how many bytes of each buffer hold real data.
const DefaultHold = 256

// Backend runs collectives on a modelled cluster.
type Backend struct {
	Net  *cluster.Net
	Hold int64 // bytes of each buffer computed for real; 0: DefaultHold
}

// New is the backend of model m.
func New(m *cluster.Model) *Backend { return &Backend{Net: cluster.NewNet(m)} }

// Name is "sim".
func (b *Backend) Name() string { return "sim" }

// Info describes the model.
func (b *Backend) Info() results.Backend {
	m := b.Net.Model()
	return results.Backend{Name: "sim", Version: fmt.Sprintf("model %s: %d hosts x %d GPUs", m.Name, m.Hosts, m.GPUsPerHost)}
}

// Supports says which collectives the model costs: those doctor runs.
func (b *Backend) Supports(c measure.Collective, t dtype.DType, op measure.ReduceOp) error {
	switch c {
	case measure.AllReduce, measure.Broadcast, measure.SendRecv:
		return nil
	}
	return fmt.Errorf("%w: the simulated backend models allreduce, broadcast and sendrecv (what doctor runs), not %s", measure.ErrUnsupported, c)
}

// DefaultRanks is every GPU of the model.
func (b *Backend) DefaultRanks() int { return b.Net.Model().Ranks() }

// Open makes a world of the model's first n GPUs.
func (b *Backend) Open(ctx context.Context, n int) (measure.World, error) {
	m := b.Net.Model()
	if n < 1 || n > m.Ranks() {
		return nil, fmt.Errorf("the model has %d GPUs; cannot open %d ranks", m.Ranks(), n)
	}
	hold := b.Hold
	if hold <= 0 {
		hold = DefaultHold
	}
	w := &World{b: b, ctx: ctx, hold: hold, n: n, clock: make([]float64, n), dev: make([]float64, n), ops: make([]uint64, n), abort: make(chan struct{})}
	w.bar = newGate(n)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	w.top = w.view(measure.Layout{Groups: [][]int{all}})
	return w, nil
}

// World is the modelled cluster's world of ranks. Its clock is modelled
// time: every operation advances its members' clocks by what the model
// says it takes, and a barrier brings every rank to the latest.
type World struct {
	b    *Backend
	ctx  context.Context
	hold int64
	n    int

	clock []float64 // µs, per world rank (written by the rank's goroutine or a gate's last arriver)
	dev   []float64 // µs of device time per world rank
	ops   []uint64  // operations issued per world rank, for the noise's draws
	extra float64   // seconds outside the ranks' clocks: communicators made
	bar   *gate

	abortOnce sync.Once
	abort     chan struct{}
	cause     error

	top    *split
	splits int

	// While recMu's recording is on, each operation's members get what
	// NCCL's proxy would report of it (Record).
	recMu     sync.Mutex
	recording bool
	recs      map[int]*results.OpRecord
}

// split is the world seen through one layout: a group per member list.
type split struct {
	w      *World
	groups []*group
	ranks  []measure.Rank

	mu    sync.Mutex
	costs map[costKey]cluster.Times
	wires map[costKey][][]cluster.Wire
}

type costKey struct {
	p     cluster.Pattern
	bytes int64
}

// group is one communicator: its members by world rank and a gate.
type group struct {
	s       *split
	idx     int
	members []int
	gate    *gate
	calls   []measure.Call // by group rank, for the operation in flight
	times   []float64      // the last operation's times, per issue
	mu      sync.Mutex
	wants   map[measure.Expectation][]float64
}

func (w *World) view(l measure.Layout) *split {
	s := &split{w: w, costs: map[costKey]cluster.Times{}, wires: map[costKey][][]cluster.Wire{}}
	owner := make([]*rank, w.n)
	for gi, members := range l.Groups {
		g := &group{s: s, idx: gi, members: members, gate: newGate(len(members)), calls: make([]measure.Call, len(members))}
		s.groups = append(s.groups, g)
		for i, r := range members {
			owner[r] = &rank{w: w, g: g, rank: i, world: r}
		}
	}
	for _, r := range owner {
		if r != nil {
			s.ranks = append(s.ranks, r)
		}
	}
	return s
}

// Size is the world's rank count.
func (w *World) Size() int { return w.n }

// Ranks are every rank, in rank order.
func (w *World) Ranks() []measure.Rank { return w.top.ranks }

// Run calls fn for every rank at once.
func (w *World) Run(fn func(measure.Rank) error) error { return w.top.run(fn) }

func (s *split) run(fn func(measure.Rank) error) error {
	errs := make([]error, len(s.ranks))
	var wg sync.WaitGroup
	for i, r := range s.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(r); err != nil {
				errs[i] = err
				s.w.Abort(err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, errAborted) {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

var errAborted = errors.New("another rank failed")

// Abort wakes every rank waiting in an operation.
func (w *World) Abort(cause error) {
	w.abortOnce.Do(func() {
		w.cause = cause
		close(w.abort)
	})
}

// Split makes a communicator per group of l; making them costs the model's
// split time.
func (w *World) Split(l measure.Layout) (measure.World, error) {
	seen := make([]bool, w.n)
	for _, g := range l.Groups {
		for _, r := range g {
			if r < 0 || r >= w.n || seen[r] {
				return nil, fmt.Errorf("layout names rank %d twice or outside the world of %d", r, w.n)
			}
			seen[r] = true
		}
	}
	w.extra += w.b.Net.Model().Costs.SplitS
	w.splits++
	return &splitWorld{s: w.view(l)}, nil
}

// Close frees nothing: buffers are garbage collected.
func (w *World) Close() error { return nil }

// Elapsed is the modelled wall time so far: the latest rank's clock and
// the communicators made.
func (w *World) Elapsed() float64 {
	latest := 0.0
	for _, c := range w.clock {
		latest = math.Max(latest, c)
	}
	return latest/1e6 + w.extra
}

// Splits is how many times the world was split into communicators.
func (w *World) Splits() int { return w.splits }

// Explainer: the model runs allreduce as a ring and broadcast as a chain.
func (w *World) Algorithm(c measure.Collective, bytes int64, ranks int) *results.AlgoChoice {
	name := map[measure.Collective]string{measure.AllReduce: "Ring", measure.Broadcast: "Ring", measure.SendRecv: "P2P"}[c]
	return &results.AlgoChoice{Algo: name, Source: "the cluster model"}
}

// Recording: the model reports each operation as collbench's profiler
// plugin inside NCCL would: the members' times on their clocks and the
// flows between hosts, each with its time on the wire.
func (w *World) Recording() (bool, string) { return true, "" }

// Recordable records every operation.
func (w *World) Recordable(measure.Collective, int64) string { return "" }

// Record runs fn with the records on (see Recording).
func (w *World) Record(fn func() error) ([]*results.OpRecord, string, error) {
	return w.record(w.top.ranks, fn)
}

func (w *World) record(ranks []measure.Rank, fn func() error) ([]*results.OpRecord, string, error) {
	w.recMu.Lock()
	w.recording, w.recs = true, map[int]*results.OpRecord{}
	w.recMu.Unlock()
	err := fn()
	w.recMu.Lock()
	recs := w.recs
	w.recording, w.recs = false, nil
	w.recMu.Unlock()
	out := make([]*results.OpRecord, len(ranks))
	for i, r := range ranks {
		out[i] = recs[r.WorldRank()]
	}
	return out, "", err
}

// recordOp gives each member of g the record of the operation c of bytes
// that ran from start for us (µs on the model's clock), if recording.
func (w *World) recordOp(g *group, c measure.Call, bytes int64, start, us float64) {
	w.recMu.Lock()
	defer w.recMu.Unlock()
	if !w.recording {
		return
	}
	pos := make(map[int]int, len(g.members))
	for i, r := range g.members {
		pos[r] = i
		w.recs[r] = &results.OpRecord{StartNS: uint64(start * 1e3), StopNS: uint64((start + us) * 1e3), Channels: 1} //nolint:gosec // G115: model times, never negative
	}
	for _, x := range g.s.flows(c, bytes)[g.idx] {
		from, to := w.recs[x.From], w.recs[x.To]
		if from == nil || to == nil {
			continue
		}
		b := int64(x.Bytes)
		from.Net = append(from.Net, results.NetSteps{Peer: pos[x.To], Send: true, Steps: 1, Bytes: b, BusyUS: x.US, MaxStepUS: x.US, WireUS: x.US})
		to.Net = append(to.Net, results.NetSteps{Peer: pos[x.From], Steps: 1, Bytes: b, BusyUS: x.US, MaxStepUS: x.US})
	}
}

// flows is what each group's operation of c moves between hosts.
func (s *split) flows(c measure.Call, bytes int64) [][]cluster.Wire {
	key := costKey{pattern(c.Coll), bytes}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.wires[key]; ok {
		return f
	}
	f := s.w.b.Net.Wires(key.p, s.memberLists(), bytes)
	s.wires[key] = f
	return f
}

type splitWorld struct{ s *split }

// Recording: as the world's.
func (sw *splitWorld) Recording() (bool, string) { return true, "" }

// Recordable records every operation.
func (sw *splitWorld) Recordable(measure.Collective, int64) string { return "" }

// Record runs fn with the records on, for the split's ranks.
func (sw *splitWorld) Record(fn func() error) ([]*results.OpRecord, string, error) {
	return sw.s.w.record(sw.s.ranks, fn)
}

func (sw *splitWorld) Size() int                                     { return sw.s.w.n }
func (sw *splitWorld) Ranks() []measure.Rank                         { return sw.s.ranks }
func (sw *splitWorld) Run(fn func(measure.Rank) error) error         { return sw.s.run(fn) }
func (sw *splitWorld) Split(l measure.Layout) (measure.World, error) { return sw.s.w.Split(l) }
func (sw *splitWorld) Close() error                                  { return nil }

// gate is a reusable meeting point of n goroutines: the last to arrive
// runs the step for everyone, then all go on.
type gate struct {
	n       int
	mu      sync.Mutex
	arrived int
	ch      chan struct{}
}

func newGate(n int) *gate { return &gate{n: n, ch: make(chan struct{})} }

// meet waits for all n; last runs on the last goroutine to arrive, before
// any leaves. It returns early if the world is aborted or its context done.
func (g *gate) meet(w *World, last func()) error {
	g.mu.Lock()
	g.arrived++
	if g.arrived == g.n {
		last()
		g.arrived = 0
		ch := g.ch
		g.ch = make(chan struct{})
		g.mu.Unlock()
		close(ch)
		return nil
	}
	ch := g.ch
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-w.abort:
		return fmt.Errorf("%w: %v", errAborted, w.cause)
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}
