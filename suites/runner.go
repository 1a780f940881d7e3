package suites

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"collbench/dtype"
	"collbench/results"
)

// Average says how the ranks' times combine into a row's time.
type Average int

// The ways to combine per-rank times.
const (
	AvgMean Average = iota
	AvgMin
	AvgMax
	AvgRank0
)

var averageNames = []string{"mean", "min", "max", "rank0"}

// ParseAverage accepts mean, min, max or rank0.
func ParseAverage(s string) (Average, error) {
	for i, n := range averageNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return Average(i), nil
		}
	}
	return 0, fmt.Errorf("unknown --average %q (valid: %s)", s, strings.Join(averageNames, ", "))
}

func (a Average) String() string { return averageNames[a] }

// Combine reduces per-rank times (in rank order) to one.
func (a Average) Combine(times []float64) float64 {
	if len(times) == 0 {
		return 0
	}
	switch a {
	case AvgMin:
		return slices.Min(times)
	case AvgMax:
		return slices.Max(times)
	case AvgRank0:
		return times[0]
	}
	var s float64
	for _, t := range times {
		s += t
	}
	return s / float64(len(times))
}

// Plan is what a sweep measures.
type Plan struct {
	Collectives []Collective
	DTypes      []dtype.DType
	Ops         []ReduceOp
	// Roots lists the roots of rooted collectives; nil means every rank.
	Roots      []int
	Sizes      []int64
	Iters      int
	Warmup     int
	Check      int
	OutOfPlace bool
	InPlace    bool
	Average    Average
	Seed       uint64
	// SkipUnsupported drops combinations the backend cannot run (for "all"
	// lists) instead of failing on them.
	SkipUnsupported bool
	// IterStats adds per-iteration timing (another Iters operations, each
	// timed on its own) and its statistics to every half.
	IterStats bool
	// GraphReplays, when above 0, captures Iters operations into a CUDA
	// graph once and replays it this many times for the timing.
	GraphReplays int
}

// Case is one collective, type, op and root to sweep over the sizes.
type Case struct {
	Coll  Collective
	DType dtype.DType
	Op    ReduceOp
	Root  int
}

// Validate checks the plan against a world of n ranks.
func (p Plan) Validate(n int) error {
	switch {
	case len(p.Collectives) == 0:
		return fmt.Errorf("no collective to run")
	case len(p.Sizes) == 0:
		return fmt.Errorf("no size to run (use --sizes, e.g. --sizes 8:1M)")
	case len(p.DTypes) == 0:
		return fmt.Errorf("no dtype to run")
	case p.Iters < 1:
		return fmt.Errorf("invalid --iters %d: must be at least 1", p.Iters)
	case p.Warmup < 0:
		return fmt.Errorf("invalid --warmup %d: must be 0 or more", p.Warmup)
	case p.Check < 0:
		return fmt.Errorf("invalid --check %d: must be 0 (off) or more", p.Check)
	case !p.OutOfPlace && !p.InPlace:
		return fmt.Errorf("no mode to run (use --mode both, out-of-place or in-place)")
	case !p.OutOfPlace && !slices.ContainsFunc(p.Collectives, Collective.InPlaceDefined):
		return fmt.Errorf("--mode in-place: %s run out-of-place only (use --mode both or out-of-place)", joinCollectives(p.Collectives))
	case n < 1:
		return fmt.Errorf("invalid rank count %d: must be at least 1", n)
	case p.GraphReplays < 0:
		return fmt.Errorf("invalid --cuda-graph %d: must be 0 (off) or a replay count", p.GraphReplays)
	}
	for _, r := range p.Roots {
		if r < 0 || r >= n {
			return fmt.Errorf("invalid --root %d: must be between 0 and %d for %d ranks, or all", r, n-1, n)
		}
	}
	return nil
}

// Cases expands the plan into the cases to run on b, in the order NCCL's
// benchmark uses: per collective, type, op, root.
func (p Plan) Cases(b Backend, n int) ([]Case, error) {
	var out []Case
	roots := p.Roots
	if roots == nil {
		for r := 0; r < n; r++ {
			roots = append(roots, r)
		}
	}
	for _, c := range p.Collectives {
		ops := []ReduceOp{NoOp}
		if c.Reduces() {
			ops = p.Ops
		}
		rs := []int{-1}
		if c.Rooted() {
			rs = roots
		}
		for _, t := range p.DTypes {
			for _, op := range ops {
				if err := b.Supports(c, t, op); err != nil {
					if p.SkipUnsupported {
						continue
					}
					return nil, err
				}
				for _, r := range rs {
					out = append(out, Case{c, t, op, r})
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the %s backend supports none of the requested dtype and op combinations", b.Name())
	}
	return out, nil
}

// Progress reports the runner's position for progress displays.
type Progress struct {
	Done, Total int
	Case        Case
	Size        int64
}

// Runner measures a plan on a world.
type Runner struct {
	World World
	Plan  Plan
	Cases []Case
	// OnRow, if set, receives each row as soon as it is measured.
	OnRow func(results.Row)
	// OnProgress, if set, is called before each row is measured.
	OnProgress func(Progress)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Run measures every case at every size. It returns the rows measured so far
// together with the error that stopped it, if any.
func (rn *Runner) Run(ctx context.Context) ([]results.Row, error) {
	w := rn.World
	n := w.Size()
	local := w.Ranks()
	index := map[int]int{}
	for i, r := range local {
		index[r.Rank()] = i
	}
	var maxBytes int64
	for _, c := range rn.Cases {
		for _, s := range rn.Plan.Sizes {
			g := GeometryFor(c.Coll, s, c.DType.Size(), n, 0)
			maxBytes = max(maxBytes, g.Bytes)
		}
	}
	bufs := &buffers{world: w, index: index, limit: max(maxBytes, 8),
		send: make([]Buffer, len(local)), recv: make([]Buffer, len(local))}
	defer bufs.release()
	if err := rn.warmWorld(bufs); err != nil {
		return nil, err
	}
	var rows []results.Row
	total := len(rn.Cases) * len(rn.Plan.Sizes)
	done := 0
	for ci, c := range rn.Cases {
		for _, size := range rn.Plan.Sizes {
			if err := ctx.Err(); err != nil {
				return rows, err
			}
			if rn.OnProgress != nil {
				rn.OnProgress(Progress{Done: done, Total: total, Case: c, Size: size})
			}
			need := GeometryFor(c.Coll, size, c.DType.Size(), n, 0).Bytes
			if err := bufs.ensure(need); err != nil {
				return rows, fmt.Errorf("%s %s %s size %s: %w", c.Coll, c.DType, c.Op, FormatSize(size), err)
			}
			row, err := rn.measure(ci, c, size, index, bufs.send, bufs.recv)
			if err != nil {
				return rows, fmt.Errorf("%s %s %s size %s: %w", c.Coll, c.DType, c.Op, FormatSize(size), err)
			}
			rows = append(rows, row)
			done++
			if rn.OnRow != nil {
				rn.OnRow(row)
			}
		}
	}
	return rows, nil
}

func (rn *Runner) measure(ci int, c Case, size int64, index map[int]int, send, recv []Buffer) (results.Row, error) {
	n := rn.World.Size()
	g0 := GeometryFor(c.Coll, size, c.DType.Size(), n, 0)
	row := results.Row{
		Collective: c.Coll.String(),
		DType:      c.DType.String(),
		Op:         c.Op.String(),
		Root:       c.Root,
		SizeBytes:  g0.Bytes,
		Count:      g0.Count,
		Ranks:      n,
	}
	for _, inPlace := range []bool{false, true} {
		if (inPlace && (!rn.Plan.InPlace || !c.Coll.InPlaceDefined())) || (!inPlace && !rn.Plan.OutOfPlace) {
			continue
		}
		h, err := rn.half(ci, c, size, inPlace, index, send, recv)
		if err != nil {
			return row, err
		}
		if inPlace {
			row.InPlace = h
		} else {
			row.OutOfPlace = h
		}
	}
	return row, nil
}

// seedFor returns the seed of check pass k of a case's size and mode, so every
// pass uses fresh inputs.
func (p Plan) seedFor(ci int, size int64, inPlace bool, k int) uint64 {
	m := 0
	if inPlace {
		m = 1
	}
	return mix(mix(p.Seed, ci, size), m, int64(k))
}

func (rn *Runner) half(ci int, c Case, size int64, inPlace bool, index map[int]int, send, recv []Buffer) (*results.Half, error) {
	p := rn.Plan
	n := rn.World.Size()
	esz := c.DType.Size()
	local := rn.World.Ranks()
	times := make([]float64, len(local))
	wrongs := make([]int64, len(local))
	samples := make([][]float64, len(local))
	bad := make([][]results.Mismatch, len(local))
	now := rn.Now
	if now == nil {
		now = time.Now
	}
	dom := DomainFor(c.Coll, c.DType, c.Op, n)
	err := rn.World.Run(func(r Rank) error {
		i := index[r.Rank()]
		g := GeometryFor(c.Coll, size, esz, n, r.Rank())
		call := Call{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Count: g.Count,
			Send: View{send[i], 0}, Recv: View{recv[i], 0}}
		if inPlace {
			call.Send = View{recv[i], 0}.At(g.SendInPlace, esz)
			call.Recv = View{recv[i], 0}.At(g.RecvInPlace, esz)
		}
		for k := 0; k < p.Check; k++ {
			e := Expectation{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Ranks: n,
				Rank: r.Rank(), Geom: g, Domain: dom, Seed: p.seedFor(ci, size, inPlace, k)}
			if inPlace {
				if err := r.Poison(View{recv[i], 0}, g.BufferElems(), c.DType); err != nil {
					return err
				}
				if err := r.Fill(call.Send, g.SendCount, e.InputPattern(r.Rank())); err != nil {
					return err
				}
			} else {
				if err := r.Fill(call.Send, g.SendCount, e.InputPattern(r.Rank())); err != nil {
					return err
				}
				if err := r.Poison(call.Recv, g.RecvCount, c.DType); err != nil {
					return err
				}
			}
			if err := r.Launch(call); err != nil {
				return err
			}
			if err := r.Sync(); err != nil {
				return err
			}
			w, err := r.Check(call.Recv, e)
			if err != nil {
				return err
			}
			wrongs[i] += w
			if mf, ok := r.(MismatchFinder); ok && w > 0 && len(bad[i]) < mismatchLimit {
				ms, err := mf.FindMismatches(call.Recv, e, mismatchLimit-len(bad[i]))
				if err != nil {
					return err
				}
				bad[i] = append(bad[i], ms...)
			}
		}
		for k := 0; k < p.Warmup; k++ {
			if err := r.Launch(call); err != nil {
				return err
			}
		}
		if err := r.Sync(); err != nil {
			return err
		}
		var err error
		if p.GraphReplays > 0 {
			times[i], err = timeGraph(r, call, p.Iters, p.GraphReplays, now)
		} else {
			times[i], err = timeLoop(r, call, p.Iters, now)
		}
		if err != nil {
			return err
		}
		if p.IterStats {
			it, ok := r.(IterTimer)
			if !ok {
				return fmt.Errorf("%w: this backend cannot time single iterations", ErrUnsupported)
			}
			if samples[i], err = it.TimeEach(call, p.Iters); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h := &results.Half{RankTimeUS: times, Iter: iterStats(samples)}
	h.TimeUS = p.Average.Combine(times)
	bytes := GeometryFor(c.Coll, size, esz, n, 0).Bytes
	if h.TimeUS > 0 {
		h.AlgBW = float64(bytes) / (h.TimeUS * 1e3)
	}
	h.BusBW = h.AlgBW * c.Coll.BusFactor(n)
	if p.Check > 0 {
		var w int64
		for _, x := range wrongs {
			w += x
		}
		h.Wrong = &w
		for _, b := range bad {
			h.Mismatches = append(h.Mismatches, b...)
		}
	}
	return h, nil
}

// mismatchLimit bounds the wrong elements listed per rank and half.
const mismatchLimit = 4

// minAlloc is the smallest buffer allocated, so small sizes share one buffer.
const minAlloc = 1 << 20

// buffers holds each local rank's send and receive buffer, grown as the
// sweep reaches larger sizes, so running out of memory stops only the sizes
// that do not fit.
type buffers struct {
	world      World
	index      map[int]int
	limit      int64 // the largest size any case needs
	have       int64
	send, recv []Buffer
}

func (b *buffers) ensure(need int64) error {
	if need <= b.have && b.have > 0 {
		return nil
	}
	size := min(max(need, minAlloc), b.limit)
	size = max(size, need)
	b.release()
	err := b.world.Run(func(r Rank) error {
		i := b.index[r.Rank()]
		var err error
		if b.send[i], err = r.Alloc(size); err != nil {
			return fmt.Errorf("allocating the send buffer (%s): %w", FormatBytes(size), err)
		}
		if b.recv[i], err = r.Alloc(size); err != nil {
			return fmt.Errorf("allocating the receive buffer (%s): %w", FormatBytes(size), err)
		}
		return nil
	})
	if err != nil {
		b.release()
		return err
	}
	b.have = size
	return nil
}

func (b *buffers) release() {
	_ = b.world.Run(func(r Rank) error {
		i := b.index[r.Rank()]
		for _, p := range []*Buffer{&b.send[i], &b.recv[i]} {
			if *p != nil {
				_ = r.Free(*p)
				*p = nil
			}
		}
		return nil
	})
	b.have = 0
}

// timeLoop issues iters operations back to back and returns the wall time of
// one, in µs, after the stream has drained.
func timeLoop(r Rank, call Call, iters int, now func() time.Time) (float64, error) {
	if err := r.Barrier(); err != nil {
		return 0, err
	}
	t0 := now()
	for k := 0; k < iters; k++ {
		if err := r.Launch(call); err != nil {
			return 0, err
		}
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	return float64(now().Sub(t0).Nanoseconds()) / 1e3 / float64(iters), nil
}

// timeGraph captures iters operations into a graph once, replays it
// replays times and returns the time of one operation, in µs.
func timeGraph(r Rank, call Call, iters, replays int, now func() time.Time) (float64, error) {
	gc, ok := r.(GraphCapturer)
	if !ok {
		return 0, fmt.Errorf("%w: this backend has no CUDA graphs", ErrUnsupported)
	}
	g, err := gc.Capture(call, iters)
	if err != nil {
		return 0, err
	}
	defer g.Destroy()
	// One untimed replay loads the graph onto the device.
	if err := g.Replay(); err != nil {
		return 0, err
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	if err := r.Barrier(); err != nil {
		return 0, err
	}
	t0 := now()
	for k := 0; k < replays; k++ {
		if err := g.Replay(); err != nil {
			return 0, err
		}
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	return float64(now().Sub(t0).Nanoseconds()) / 1e3 / float64(iters*replays), nil
}

// iterStats averages each iteration over ranks and summarises the result.
func iterStats(samples [][]float64) *results.IterStats {
	if len(samples) == 0 || len(samples[0]) == 0 {
		return nil
	}
	per := make([]float64, len(samples[0]))
	for _, s := range samples {
		for k := range per {
			if k < len(s) {
				per[k] += s[k] / float64(len(samples))
			}
		}
	}
	return results.NewIterStats(per)
}

func joinCollectives(cs []Collective) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.String())
	}
	return strings.Join(names, ", ")
}

// warmupOps is how many untimed operations run once before the first row,
// so connection setup and clock ramp-up do not land in the first timing.
const warmupOps = 20

// warmWorld runs the first case at its first size warmupOps times.
func (rn *Runner) warmWorld(bufs *buffers) error {
	if len(rn.Cases) == 0 || len(rn.Plan.Sizes) == 0 || rn.Plan.Warmup == 0 {
		return nil
	}
	c, size := rn.Cases[0], rn.Plan.Sizes[0]
	n := rn.World.Size()
	if err := bufs.ensure(GeometryFor(c.Coll, size, c.DType.Size(), n, 0).Bytes); err != nil {
		return err
	}
	return rn.World.Run(func(r Rank) error {
		i := bufs.index[r.Rank()]
		g := GeometryFor(c.Coll, size, c.DType.Size(), n, r.Rank())
		call := Call{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Count: g.Count,
			Send: View{bufs.send[i], 0}, Recv: View{bufs.recv[i], 0}}
		for k := 0; k < warmupOps; k++ {
			if err := r.Launch(call); err != nil {
				return err
			}
		}
		return r.Sync()
	})
}
