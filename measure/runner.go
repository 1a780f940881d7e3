package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
	group   []int       // position -> group id
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
	rn.group = make([]int, len(local))
	for i, r := range local {
		rn.index[r.WorldRank()] = i
		rn.group[i], _ = rn.layout.Locate(r.WorldRank())
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

// StableMinCycles and StableTolerance define a stable sweep (Plan.Stable):
// at least StableMinCycles cycles, ended by the second cycle in a row that
// moved no row's median time by more than StableTolerance (relative).
// StableMaxCycles is the bound when the plan sets none.
const (
	StableMinCycles = 3
	StableMaxCycles = 10
	StableTolerance = 0.02
)

// cycleMedian is the median of a half's cycle times (the mean of the two
// middle ones for an even count), or its time before a second cycle.
func cycleMedian(h *results.Half) float64 {
	if h.Cycles == nil || len(h.Cycles.TimesUS) == 0 {
		return h.TimeUS
	}
	ts := slices.Sorted(slices.Values(h.Cycles.TimesUS))
	n := len(ts)
	return (ts[(n-1)/2] + ts[n/2]) / 2
}

// settled records each row's median times after a cycle in prev and says
// whether the sweep is stable, or at its bound. Rank 0 decides (it holds
// every rank's figures); the other processes follow.
func (rn *Runner) settled(rows []results.Row, prev [][]float64, done, bound int) (bool, error) {
	moved := 0.0
	for i, r := range rows {
		var now []float64
		for k, h := range r.Halves() {
			med := cycleMedian(h)
			now = append(now, med)
			if k < len(prev[i]) && prev[i][k] > 0 {
				moved = max(moved, math.Abs(med-prev[i][k])/prev[i][k])
			}
		}
		prev[i] = now
	}
	still := done > 1 && moved <= StableTolerance
	stop := done >= StableMinCycles && still && rn.stillBefore
	rn.stillBefore = still
	if d, ok := rn.w.(Distributed); ok && d.Control() != nil {
		mine := []byte{0}
		if stop {
			mine[0] = 1
		}
		all, err := d.Control().AllGather(mine)
		if err != nil {
			return false, fmt.Errorf("agreeing whether the sweep is stable: %w", err)
		}
		stop = len(all) > 0 && len(all[0]) == 1 && all[0][0] == 1
	}
	switch {
	case stop:
		rn.StableNote = fmt.Sprintf("stable after %d cycles: the last two moved no row's median time by more than %.3g%%", done, StableTolerance*100)
	case done >= bound:
		rn.StableNote = fmt.Sprintf("not stable after %d cycles, the bound (--cycles): the last moved a row's median time by %.3g%%", done, moved*100)
	}
	return stop, nil
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
			grs[gi].Algorithm = ex.Algorithm(c.Coll, grs[gi].SizeBytes, len(g))
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
	agg := &results.Half{RankTimeUS: rankTimes}
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
	var recs []*results.OpRecord
	base := int64(p.Misalign * esz)
	now := rn.Now
	if now == nil {
		now = time.Now
	}
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
		tr.Begin(what, watchdog.Warmup, p.Warmup)
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
		if p.GraphReplays > 0 {
			times[i], err = timeGraph(r, tr, what, call, p.Iters, p.GraphReplays, now)
		} else {
			times[i], cpus[i], err = timeLoop(r, tr, what, call, p, now)
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
			if samples[i], err = it.TimeEach(call, p.Iters); err != nil {
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
		var note string
		var err error
		recs, note, err = rn.record(rn.recording(c, size), func() error {
			return rn.w.Run(func(r Rank) error {
				_, call, _ := callOf(r)
				tr := rn.Board.For(r.WorldRank())
				// Issued together, as the timed loop's are (align): the
				// kernels' starts then differ by what the ranks do, not
				// by when their threads woke up.
				tr.SetPhase(watchdog.Barrier)
				if err := r.Barrier(); err != nil {
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
			return nil, nil, nil, err
		}
		rn.note(note)
		if err := rn.w.Run(measure); err != nil {
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
			Sent: sent[i], Recv: recvd[i], CPU: cpus[i]}
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
		bytes := GeometryFor(c.Coll, size, esz, len(members), 0).Bytes
		if h.TimeUS > 0 && rn.hasBandwidth(members) {
			h.AlgBW = float64(bytes) / (h.TimeUS * 1e3)
			h.BusBW = h.AlgBW * c.Coll.BusFactor(len(members))
		}
		if p.Check > 0 {
			h.Wrong = &wrong
		}
		h.Kernels, algos[gi] = kernelTimes(all, members, rn.clocks)
		hs = append(hs, h)
	}
	worldTimes := make([]float64, n)
	for wr := range all {
		worldTimes[wr] = all[wr].Time
	}
	return hs, worldTimes, algos, nil
}

// record runs fn, which issues operations, with the library's recorder on
// if on; either way fn runs once.
func (rn *Runner) record(on bool, fn func() error) ([]*results.OpRecord, string, error) {
	if !on {
		return nil, "", fn()
	}
	return rn.rec.Record(fn)
}

// recording says whether the row of c at size is recorded: the world
// records, still (a library can stop recording partway), and can record
// this operation. Why not is noted once.
func (rn *Runner) recording(c Case, size int64) bool {
	if rn.rec == nil || rn.Plan.NoRecord {
		return false
	}
	if on, why := rn.rec.Recording(); !on {
		rn.note(why)
		rn.rec = nil
		return false
	}
	if why := rn.rec.Recordable(c.Coll, size); why != "" {
		rn.note(why)
		return false
	}
	return true
}

// kernelTimes puts the members' recorded operations together: their kernel
// times, starts after the earliest, channels and network steps, and the
// group's algorithm (its first member's that has one). Both are nil when no
// member recorded anything.
func kernelTimes(all []rankResult, members []int, clocks map[int]clockBound) (*results.KernelTimes, *results.AlgoChoice) {
	var algo *results.AlgoChoice
	have, net := false, false
	for _, wr := range members {
		rec := all[wr].Rec
		if rec == nil {
			continue
		}
		if algo == nil && rec.Algorithm != nil {
			algo = rec.Algorithm
		}
		have = have || rec.Channels > 0
		net = net || len(rec.Net) > 0
	}
	if !have {
		return nil, algo
	}
	k := &results.KernelTimes{Source: "NCCL profiler plugin"}
	for _, wr := range members {
		rec := all[wr].Rec
		if rec == nil || rec.Channels == 0 || rec.StopNS < rec.StartNS {
			k.DurationUS = append(k.DurationUS, -1)
			k.StartUS = append(k.StartUS, -1)
			k.Channels = append(k.Channels, 0)
		} else {
			k.DurationUS = append(k.DurationUS, float64(rec.StopNS-rec.StartNS)/1e3)
			k.StartUS = append(k.StartUS, -1)
			k.Channels = append(k.Channels, rec.Channels)
		}
		if net {
			var steps []results.NetSteps
			if rec != nil {
				steps = rec.Net
			}
			k.Net = append(k.Net, steps)
		}
	}
	alignStarts(k, all, members, clocks)
	return k, algo
}

// clockBound is what is known of one rank's GPU timer: its offset from
// the host's clock (host minus GPU, ns) lies in [lo, hi]; clock names the
// host clock.
type clockBound struct {
	lo, hi int64
	clock  string
}

// narrowClocks intersects each rank's clock bounds with those its latest
// record shows. A record that does not overlap what is known (the timers
// drifted apart) starts the bounds anew from itself.
func (rn *Runner) narrowClocks(all []rankResult) {
	for wr, rr := range all {
		rec := rr.Rec
		if rec == nil || rec.Clock == "" || rec.ClockLoNS > rec.ClockHiNS {
			continue
		}
		if rn.clocks == nil {
			rn.clocks = map[int]clockBound{}
		}
		b, ok := rn.clocks[wr]
		nb := clockBound{lo: max(b.lo, rec.ClockLoNS), hi: min(b.hi, rec.ClockHiNS), clock: rec.Clock}
		if !ok || b.clock != rec.Clock || nb.lo > nb.hi {
			nb = clockBound{lo: rec.ClockLoNS, hi: rec.ClockHiNS, clock: rec.Clock}
		}
		rn.clocks[wr] = nb
	}
}

// alignStarts sets k's starts on the host's clock, each rank's GPU timer
// moved by the middle of its offset bounds, with half their width as the
// error. Where a member's timer has no bounds, or the members' host
// clocks differ (ranks on several hosts), the starts stay unknown (-1).
func alignStarts(k *results.KernelTimes, all []rankResult, members []int, clocks map[int]clockBound) {
	host := make([]float64, len(members))
	known := make([]bool, len(members)) // the member recorded a start
	errs := make([]float64, len(members))
	clock := ""
	first, have := 0.0, false
	for i, wr := range members {
		rec := all[wr].Rec
		if rec == nil || rec.Channels == 0 {
			continue
		}
		known[i] = true
		b, ok := clocks[wr]
		if !ok || (clock != "" && b.clock != clock) {
			return
		}
		clock = b.clock
		host[i] = float64(rec.StartNS) + (float64(b.lo)+float64(b.hi))/2
		errs[i] = float64(b.hi-b.lo) / 2 / 1e3
		if !have || host[i] < first {
			first, have = host[i], true
		}
	}
	if !have {
		return
	}
	for i := range members {
		if known[i] {
			k.StartUS[i] = (host[i] - first) / 1e3
		}
	}
	k.ClockErrorUS = errs
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
}

// rankBytes lists the members' bytes per operation, in group-rank order.
func rankBytes(all []rankResult, members []int) (sent, recvd []int64) {
	for _, wr := range members {
		sent = append(sent, all[wr].Sent)
		recvd = append(recvd, all[wr].Recv)
	}
	return sent, recvd
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

// warmWorld runs the first case at its first size warmupOps times.
func (rn *Runner) warmWorld(bufs *buffers) error {
	if len(rn.Cases) == 0 || len(rn.Plan.Sizes) == 0 || rn.Plan.Warmup == 0 || rn.SkipWorldWarmup {
		return nil
	}
	c, size := rn.Cases[0], rn.Plan.Sizes[0]
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
	return rn.w.Run(warm(warmupOps))
}

// mismatchLimit bounds the wrong elements listed per rank and half.
const mismatchLimit = 4
