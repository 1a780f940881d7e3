package measure

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"collbench/internal/words"
	"collbench/results"
	"collbench/watchdog"
)

// Progress reports the runner's position for progress displays.
type Progress struct {
	Done, Total int
	Case        Case
	Size        int64
	// BytesLeft is the sum of the sizes of the rows not yet finished, this
	// one included: time left grows with it, not only with the row count.
	BytesLeft int64
}

// Runner measures a plan on a world, optionally split into groups that
// run concurrently, each verified and reported on its own.
type Runner struct {
	World World
	Plan  Plan
	Cases []Case
	// Layout splits the world into groups; the zero value is the whole world.
	Layout Layout
	// Grouped, if set, is World already split by Layout; the runner uses it
	// and leaves closing it to the caller.
	Grouped World
	// OnRow, if set, receives each row as soon as it is measured, with its
	// index among the rows; with cycles, a row comes again after each cycle
	// with every cycle so far merged.
	OnRow func(index int, row results.Row)
	// OnProgress, if set, is called before each row is measured.
	OnProgress func(Progress)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Board, if set, receives every local rank's progress for the watchdog.
	Board *watchdog.Board
	// SkipWorldWarmup leaves out the untimed operations before the first
	// row (for callers that run many short plans on a warm world).
	SkipWorldWarmup bool
	// OnNote, if set, receives each distinct note about what a row lacks
	// (the library's recorder missing events, say), once.
	OnNote func(string)
	// MaxTime, if set, refuses (PlanTooLongError) a plan that could not
	// finish within it at the time one operation of the world's warm-up
	// took here, the slowest process's, before any row is measured.
	MaxTime time.Duration
	// OnEstimate, if set, receives that least time and the time one
	// operation took, before the first row.
	OnEstimate func(floor, perOp time.Duration)

	// CyclesRun is the cycles the run measured; StableNote says, with
	// Plan.Stable, whether the rows settled or the bound ended it.
	CyclesRun   int
	StableNote  string
	stillBefore bool // the cycle before the last moved no row's median beyond StableTolerance

	cycle   int   // the cycle being measured
	bufHave int64 // the largest buffer size allocated
	w       World // the world the ranks run in (split when there are groups)
	layout  Layout
	index   map[int]int // world rank -> position in w.Ranks()
	rec     Recorder    // the world's recorder, nil when it records nothing
	// recorder is the world as a Recorder, nil if it is none: such a
	// world issues an untimed operation per row whether it records it
	// or not.
	recorder Recorder
	// clocks are the world ranks' GPU timer offsets from the host's clock,
	// as the recorded operations bound them so far.
	clocks map[int]clockBound
	noted  map[string]bool
}

// Run measures every case at every size. It returns the rows measured so far
// together with the error that stopped it, if any.
func (rn *Runner) Run(ctx context.Context) ([]results.Row, error) {
	n := rn.World.Size()
	rn.layout = rn.Layout
	if len(rn.layout.Groups) == 0 {
		rn.layout = WholeWorld(n)
	}
	rn.w = rn.World
	if rn.Grouped != nil {
		rn.w = rn.Grouped
	} else if len(rn.layout.Groups) > 1 {
		sw, err := rn.World.Split(rn.layout)
		if err != nil {
			return nil, err
		}
		defer sw.Close()
		rn.w = sw
	}
	var colls []Collective
	for _, c := range rn.Cases {
		colls = append(colls, c.Coll)
	}
	if err := CheckGroups(colls, rn.layout.Groups); err != nil {
		return nil, err
	}
	if r, ok := rn.w.(Recorder); ok {
		rn.recorder = r
		if on, _ := r.Recording(); on {
			rn.rec = r
		}
	}
	local := rn.w.Ranks()
	rn.index = map[int]int{}
	for i, r := range local {
		rn.index[r.WorldRank()] = i
	}
	var maxBytes int64
	for _, c := range rn.Cases {
		for _, s := range rn.Plan.Sizes {
			for _, g := range rn.layout.Groups {
				maxBytes = max(maxBytes, GeometryFor(c.Coll, s, c.DType.Size(), len(g), 0).Bytes)
			}
		}
	}
	if err := rn.checkMemory(); err != nil {
		return nil, err
	}
	pad := int64(8 * rn.Plan.Misalign) // room for misaligned views
	bufs := &buffers{world: rn.w, index: rn.index, limit: max(maxBytes+pad, 8), register: rn.Plan.Register,
		send: make([]Buffer, len(local)), recv: make([]Buffer, len(local))}
	if br, ok := rn.w.(BufferRotator); ok && br.RotatesBuffers() {
		bufs.room = RotationRoom
	}
	defer bufs.release()
	if err := rn.warmWorld(bufs); err != nil {
		return nil, err
	}
	var rows []results.Row
	cycles := rn.Plan.CycleBound()
	perCycle := len(rn.Cases) * len(rn.Plan.Sizes)
	total := perCycle * cycles
	var sizeSum int64
	for range rn.Cases {
		for _, size := range rn.Plan.Sizes {
			sizeSum += size
		}
	}
	bytesLeft := sizeSum * int64(cycles)
	done := 0
	seen := make([][]results.Row, perCycle)
	prev := make([][]float64, perCycle)
	for cycle := 0; cycle < cycles; cycle++ {
		rn.cycle = cycle
		idx := 0
		for ci, c := range rn.Cases {
			for _, size := range rn.Plan.Sizes {
				if err := ctx.Err(); err != nil {
					return rows, err
				}
				if rn.OnProgress != nil {
					rn.OnProgress(Progress{Done: done, Total: total, Case: c, Size: size, BytesLeft: bytesLeft})
				}
				bytesLeft -= size
				var need int64
				for _, g := range rn.layout.Groups {
					need = max(need, GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0).Bytes)
				}
				if err := bufs.ensure(need + pad); err != nil {
					return rows, fmt.Errorf("%s %s %s size %s: %w", c.Coll, c.DType, c.Op, words.SizeArg(size), err)
				}
				rn.bufHave = max(rn.bufHave, bufs.have)
				row, err := rn.measure(ci, c, size, bufs.send, bufs.recv)
				if err != nil {
					return rows, fmt.Errorf("%s %s %s size %s: %w", c.Coll, c.DType, c.Op, words.SizeArg(size), err)
				}
				if cycles > 1 {
					seen[idx] = append(seen[idx], row)
					row = mergeCycles(seen[idx])
				}
				if cycle == 0 {
					rows = append(rows, row)
				} else {
					rows[idx] = row
				}
				done++
				if rn.OnRow != nil {
					rn.OnRow(idx, row)
				}
				idx++
			}
		}
		rn.CyclesRun = cycle + 1
		if rn.Plan.Stable {
			stop, err := rn.settled(rows, prev, cycle+1, cycles)
			if err != nil || stop {
				return rows, err
			}
		}
	}
	return rows, nil
}

// BufferBytes is what each rank's two buffers took at their largest.
func (rn *Runner) BufferBytes() int64 { return 2 * rn.bufHave }

// hasBandwidth says whether a group's bandwidth is reported. A group of one
// inside a split moves no data and has none; a world of one rank reports
// size/time as the reference benchmark does on one GPU (busbw then follows
// the collective's factor).
func (rn *Runner) hasBandwidth(group []int) bool {
	return len(group) > 1 || len(rn.layout.Groups) == 1
}

// measure measures one case at one size in every mode asked, on every
// group of the layout, and returns its row.
func (rn *Runner) measure(ci int, c Case, size int64, send, recv []Buffer) (results.Row, error) {
	groups := rn.layout.Groups
	esz := c.DType.Size()
	row := results.Row{Collective: c.Coll.String(), DType: c.DType.String(), Op: c.Op.String(),
		Root: c.Root, Ranks: rn.World.Size()}
	var grs []results.GroupResult
	for gi, g := range groups {
		geo := GeometryFor(c.Coll, size, esz, len(g), 0)
		grs = append(grs, results.GroupResult{ID: gi, Ranks: append([]int(nil), g...), SizeBytes: geo.Bytes,
			Count: geo.Count, NoBandwidth: !rn.hasBandwidth(g)})
		if geo.Bytes > row.SizeBytes || gi == 0 {
			row.SizeBytes, row.Count = max(row.SizeBytes, geo.Bytes), geo.Count
		}
	}
	for _, inPlace := range []bool{false, true} {
		if (inPlace && (!rn.Plan.InPlace || !c.Coll.InPlaceDefined())) || (!inPlace && !rn.Plan.OutOfPlace) {
			continue
		}
		hs, all, algos, err := rn.half(ci, c, size, inPlace, send, recv)
		if err != nil {
			return row, err
		}
		for gi, a := range algos {
			if a != nil && grs[gi].Algorithm == nil {
				grs[gi].Algorithm = a
			}
		}
		for gi := range grs {
			if inPlace {
				grs[gi].InPlace = hs[gi]
			} else {
				grs[gi].OutOfPlace = hs[gi]
			}
		}
		agg := hs[0]
		if len(groups) > 1 {
			agg = aggregate(hs, grs, all)
		}
		if inPlace {
			row.InPlace = agg
		} else {
			row.OutOfPlace = agg
		}
	}
	if ex, ok := rn.w.(Explainer); ok {
		for gi, g := range groups {
			if a := ex.Algorithm(c.Coll, grs[gi].SizeBytes, len(g)); a != nil {
				grs[gi].Algorithm = a
			}
		}
	}
	for gi := range grs {
		if row.Algorithm == nil {
			row.Algorithm = grs[gi].Algorithm
		}
	}
	if len(groups) > 1 {
		row.Groups = grs
	}
	return row, nil
}

// aggregate combines the groups' halves: the slowest group's time and the
// sum of bandwidths, over groups of more than one rank where there are any.
func aggregate(hs []*results.Half, grs []results.GroupResult, rankTimes []float64) *results.Half {
	agg := &results.Half{RankTimeUS: rankTimes, Bitwise: mergeBits(hs)}
	multi := false
	for gi := range grs {
		multi = multi || !grs[gi].NoBandwidth
	}
	for gi, h := range hs {
		if h.Wrong != nil {
			if agg.Wrong == nil {
				agg.Wrong = new(int64)
			}
			*agg.Wrong += *h.Wrong
		}
		agg.Mismatches = append(agg.Mismatches, h.Mismatches...)
		if multi && grs[gi].NoBandwidth {
			continue
		}
		agg.TimeUS = max(agg.TimeUS, h.TimeUS)
		agg.AlgBW += h.AlgBW
		agg.BusBW += h.BusBW
	}
	return agg
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

// half measures one mode on every rank and returns each group's half,
// every rank's time in world-rank order, and each group's algorithm where
// the library's recorder gave one.
func (rn *Runner) half(ci int, c Case, size int64, inPlace bool, send, recv []Buffer) ([]*results.Half, []float64, []*results.AlgoChoice, error) {
	p := rn.Plan
	esz := c.DType.Size()
	local := rn.w.Ranks()
	times := make([]float64, len(local))
	wrongs := make([]int64, len(local))
	samples := make([][]float64, len(local))
	bad := make([][]results.Mismatch, len(local))
	sent := make([]int64, len(local))
	recvd := make([]int64, len(local))
	cpus := make([]float64, len(local))
	bits := make([]*rankBits, len(local))
	var recs []*results.OpRecord
	base := int64(p.Misalign * esz)
	now := rn.now
	what := describeCase(c, size, inPlace)
	// callOf is rank r's operation in this half.
	callOf := func(r Rank) (int, Call, Geometry) {
		i := rn.index[r.WorldRank()]
		g := GeometryFor(c.Coll, size, esz, r.Size(), r.Rank())
		call := Call{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Count: g.Count,
			Send: View{send[i], base}, Recv: View{recv[i], base}}
		if inPlace {
			call.Send = View{recv[i], base}.At(g.SendInPlace, esz)
			call.Recv = View{recv[i], base}.At(g.RecvInPlace, esz)
		}
		return i, call, g
	}
	// prepare verifies the output and warms up.
	prepare := func(r Rank) error {
		i, call, g := callOf(r)
		dom := DomainFor(c.Coll, c.DType, c.Op, r.Size())
		tr := rn.Board.For(r.WorldRank())
		for k := 0; k < p.Check; k++ {
			e := Expectation{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Ranks: r.Size(),
				Rank: r.Rank(), Geom: g, Domain: dom, Seed: p.seedFor(ci, size, inPlace, k+rn.cycle*p.Check)}
			w, ms, err := checkOnce(r, tr, what, call, e, inPlace, View{recv[i], base}, mismatchLimit-len(bad[i]))
			if err != nil {
				return err
			}
			wrongs[i] += w
			bad[i] = append(bad[i], ms...)
		}
		if p.Bitwise > 0 && BitwiseApplies(c.Coll, c.DType) {
			var err error
			if bits[i], err = bitwiseRuns(r, tr, what, call, g, inPlace, View{recv[i], base}, p.seedFor(ci, size, inPlace, -1-rn.cycle), p.Bitwise); err != nil {
				return err
			}
		}
		tr.Begin(what, watchdog.Warmup, p.Warmup)
		call.Rotate = RotateWarmup
		if err := issue(r, tr, call, p.Warmup); err != nil {
			return err
		}
		return r.Sync()
	}
	// measure times the operation.
	measure := func(r Rank) error {
		i, call, _ := callOf(r)
		tr := rn.Board.For(r.WorldRank())
		tc, counts := r.(TrafficCounter)
		var s0, r0 int64
		if counts {
			s0, r0 = tc.Traffic()
		}
		var err error
		timed := call
		timed.Rotate = RotateTimed
		if p.GraphReplays > 0 {
			times[i], err = timeGraph(r, tr, what, timed, p.Iters, p.GraphReplays, now)
		} else {
			times[i], cpus[i], err = timeLoop(r, tr, what, timed, p, now)
		}
		if err != nil {
			return err
		}
		if counts {
			s1, r1 := tc.Traffic()
			// The timed loop ran iters operations (agg each) after one
			// aligning operation.
			ops := int64(p.Iters)
			if p.GraphReplays == 0 {
				ops = ops*int64(max(p.Agg, 1)) + 1
			}
			sent[i], recvd[i] = (s1-s0)/ops, (r1-r0)/ops
		}
		if p.IterStats {
			it, ok := r.(IterTimer)
			if !ok {
				return fmt.Errorf("%w: this backend cannot time single iterations", ErrUnsupported)
			}
			tr.Begin(what+" (per-iteration timing)", watchdog.Timed, p.Iters)
			if samples[i], err = it.TimeEach(timed, p.Iters); err != nil {
				return err
			}
		}
		tr.SetPhase(watchdog.Idle)
		return nil
	}
	// The library records one untimed operation of the row's first half,
	// after the warm-up and before the timed loop, with every local rank
	// past its warm-up, so nothing else is recorded. A world that can
	// record issues that operation whether it records it or not: the
	// ranks of every process issue the same operations, though one
	// process may record and another not (a library that stopped
	// recording in one of them).
	if rn.recorder != nil && inPlace == !p.OutOfPlace {
		if err := rn.w.Run(prepare); err != nil {
			return nil, nil, nil, err
		}
		var err error
		if recs, err = rn.recordOne(c, size, what, callOf); err != nil {
			return nil, nil, nil, err
		}
		if err = rn.w.Run(measure); err != nil {
			return nil, nil, nil, err
		}
	} else if err := rn.w.Run(func(r Rank) error {
		if err := prepare(r); err != nil {
			return err
		}
		return measure(r)
	}); err != nil {
		return nil, nil, nil, err
	}
	// Every rank's results, by world rank (gathered from every process).
	n := rn.World.Size()
	var mine []rankResult
	for i, r := range local {
		rr := rankResult{WorldRank: r.WorldRank(), Time: times[i], Wrong: wrongs[i], Samples: samples[i], Bad: bad[i],
			Sent: sent[i], Recv: recvd[i], CPU: cpus[i], Bits: bits[i]}
		if i < len(recs) {
			rr.Rec = recs[i]
		}
		mine = append(mine, rr)
	}
	all, err := rn.gather(mine, n)
	if err != nil {
		return nil, nil, nil, err
	}
	rn.narrowClocks(all)
	hs, algos := rn.groupHalves(all, c, size)
	worldTimes := make([]float64, n)
	for wr := range all {
		worldTimes[wr] = all[wr].Time
	}
	return hs, worldTimes, algos, nil
}

// recordOne issues the row's one untimed operation that the library
// records (the algorithm and each rank's kernel times), every local rank
// at once, and passes on the recorder's note.
func (rn *Runner) recordOne(c Case, size int64, what string, callOf func(Rank) (int, Call, Geometry)) ([]*results.OpRecord, error) {
	recs, note, err := rn.record(rn.recording(c, size), func() error {
		return rn.w.Run(func(r Rank) error {
			_, call, _ := callOf(r)
			tr := rn.Board.For(r.WorldRank())
			// Issued together: the kernels' starts then differ by
			// what the ranks do, not by when their threads woke up or
			// a barrier over the network let their processes go.
			tr.SetPhase(watchdog.Barrier)
			if err := startTogether(r); err != nil {
				return err
			}
			tr.Begin(what+" (recorded by the library)", watchdog.Timed, 1)
			tr.Op(1)
			if err := r.Launch(call); err != nil {
				return err
			}
			return r.Sync()
		})
	})
	if err != nil {
		return nil, err
	}
	rn.note(note)
	return recs, nil
}

// note passes a note on once.
func (rn *Runner) note(s string) {
	if s == "" || rn.OnNote == nil || rn.noted[s] {
		return
	}
	if rn.noted == nil {
		rn.noted = map[string]bool{}
	}
	rn.noted[s] = true
	rn.OnNote(s)
}

// describeCase names what a rank works on, for progress records.
func describeCase(c Case, size int64, inPlace bool) string {
	parts := []string{c.Coll.String(), c.DType.String()}
	if c.Coll.Reduces() {
		parts = append(parts, c.Op.String())
	}
	if c.Coll.Rooted() {
		parts = append(parts, fmt.Sprintf("root %d", c.Root))
	}
	parts = append(parts, words.SizeArg(size))
	if inPlace {
		parts = append(parts, "in-place")
	} else {
		parts = append(parts, "out-of-place")
	}
	return strings.Join(parts, " ")
}

// checkOnce fills fresh inputs, runs the operation once and counts the
// wrong elements of its output, listing up to limit of them.
func checkOnce(r Rank, tr *watchdog.Tracker, what string, call Call, e Expectation, inPlace bool, whole View, limit int) (int64, []results.Mismatch, error) {
	tr.Begin(what, watchdog.Fill, 0)
	if inPlace {
		if err := r.Poison(whole, e.Geom.BufferElems(), e.DType); err != nil {
			return 0, nil, err
		}
	}
	if err := r.Fill(call.Send, e.Geom.SendCount, e.InputPattern(e.Rank)); err != nil {
		return 0, nil, err
	}
	if !inPlace {
		if err := r.Poison(call.Recv, e.Geom.RecvCount, e.DType); err != nil {
			return 0, nil, err
		}
	}
	tr.Begin(what, watchdog.Check, 1)
	tr.Op(1)
	if err := r.Launch(call); err != nil {
		return 0, nil, err
	}
	if err := r.Sync(); err != nil {
		return 0, nil, err
	}
	w, err := r.Check(call.Recv, e)
	if err != nil || w == 0 || limit <= 0 {
		return w, nil, err
	}
	mf, ok := r.(MismatchFinder)
	if !ok {
		return w, nil, nil
	}
	ms, err := mf.FindMismatches(call.Recv, e, limit)
	return w, ms, err
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

// warmTarget is the first case and size of the plan that moves data in
// every group: a row below one element per rank (allgather of 8 B on 4
// ranks) is discarded by the library and warms nothing (on 4x H200 the
// first gather and scatter rows after such a row ran 26-41 us against 11
// later). ok is false where no row moves data.
func warmTarget(cases []Case, sizes []int64, groups [][]int) (c Case, size int64, ok bool) {
	for _, c := range cases {
		for _, size := range sizes {
			moves := len(groups) > 0
			for _, g := range groups {
				if GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0).Count == 0 {
					moves = false
				}
			}
			if moves {
				return c, size, true
			}
		}
	}
	return Case{}, 0, false
}

// warmWorld runs the first case and size that moves data (warmTarget)
// warmupOps times.
func (rn *Runner) warmWorld(bufs *buffers) error {
	if rn.Plan.Warmup == 0 || rn.SkipWorldWarmup {
		return nil
	}
	c, size, ok := warmTarget(rn.Cases, rn.Plan.Sizes, rn.layout.Groups)
	if !ok {
		return nil
	}
	var need int64
	for _, g := range rn.layout.Groups {
		need = max(need, GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0).Bytes)
	}
	if err := bufs.ensure(need); err != nil {
		return err
	}
	warm := func(ops int) func(r Rank) error {
		return func(r Rank) error {
			i := bufs.index[r.WorldRank()]
			g := GeometryFor(c.Coll, size, c.DType.Size(), r.Size(), r.Rank())
			call := Call{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Count: g.Count,
				Send: View{bufs.send[i], 0}, Recv: View{bufs.recv[i], 0}}
			tr := rn.Board.For(r.WorldRank())
			tr.Begin("warm-up of "+describeCase(c, size, false), watchdog.Warmup, ops)
			defer tr.SetPhase(watchdog.Idle)
			for k := 0; k < ops; k++ {
				tr.Op(k + 1)
				if err := r.Launch(call); err != nil {
					return err
				}
			}
			return r.Sync()
		}
	}
	// The library's first recorded operation sets its recorder up (on 4x
	// H200 with NCCL 2.28.3 it took 40-110 ms, and the timed loop after
	// it ran 28 us an op instead of 11): one recorded, thrown away, so
	// the first row costs what it costs when measured later.
	if rn.recorder != nil {
		if _, _, err := rn.record(rn.recording(c, size), func() error { return rn.w.Run(warm(1)) }); err != nil {
			return err
		}
	}
	// The first half sets up what the first operations need (on 2x H200
	// under launch -n 2 the 20 together took 378 us an operation, where
	// one takes about 10): the second half is timed, for checkLength.
	if err := rn.w.Run(warm(warmupOps / 2)); err != nil {
		return err
	}
	start := rn.now()
	if err := rn.w.Run(warm(warmupOps - warmupOps/2)); err != nil {
		return err
	}
	return rn.checkLength(rn.now().Sub(start) / (warmupOps - warmupOps/2))
}

// checkLength refuses the plan where, at perOp a operation (the slowest
// process's, so that every process decides alike), it could not finish
// within MaxTime.
func (rn *Runner) checkLength(perOp time.Duration) error {
	// Every process gathers, whatever it is told to do with the result
	// (OnEstimate is rank 0's alone): the rounds are lock-step.
	if d, ok := rn.w.(Distributed); ok && d.Control() != nil {
		all, err := d.Control().AllGather(binary.BigEndian.AppendUint64(nil, uint64(max(perOp, 0)))) //nolint:gosec // G115: not negative
		if err != nil {
			return err
		}
		for _, b := range all {
			if len(b) == 8 {
				perOp = max(perOp, time.Duration(binary.BigEndian.Uint64(b))) //nolint:gosec // G115: a duration sent as its bits
			}
		}
	}
	perOp = max(perOp, OpFloor)
	floor, ops := rn.Plan.FloorTimeAt(rn.World.Size(), perOp)
	if rn.MaxTime > 0 && floor > rn.MaxTime {
		return &PlanTooLongError{Floor: floor, PerOp: perOp, Limit: rn.MaxTime, Ops: ops}
	}
	if rn.OnEstimate != nil {
		rn.OnEstimate(floor, perOp)
	}
	return nil
}

// now is the runner's clock.
func (rn *Runner) now() time.Time {
	if rn.Now != nil {
		return rn.Now()
	}
	return time.Now()
}

// mismatchLimit bounds the wrong elements listed per rank and half.
const mismatchLimit = 4
