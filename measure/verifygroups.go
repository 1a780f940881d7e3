package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"collbench/dtype"
	"collbench/results"
	"collbench/watchdog"
)

// DefaultLayouts are the layouts verify-groups checks when none is given:
// all ranks, node-local and cross-node when the ranks span several hosts,
// pairs, halves, uneven, reversed, interleaved and singletons.
// Layouts that resolve to the same groups are checked once, under both
// names ("pairs = halves").
func DefaultLayouts(n int, hosts []string) []Layout {
	type named struct{ name, spec string }
	specs := []named{{"all", "all"}}
	multiHost := false
	for _, h := range hosts {
		multiHost = multiHost || h != hosts[0]
	}
	if multiHost {
		// Listed first so their names win over identical generic layouts.
		specs = append(specs, named{"node", "node"}, named{"cross-node", "cross-node"})
	}
	specs = append(specs, named{"pairs", "pairs"}, named{"halves", "halves"})
	if n >= 3 {
		// Listing all but one rank leaves that rank alone.
		specs = append(specs, named{"uneven", rangeList(0, n-1)}, named{"reversed", rangeList(1, n)})
	}
	specs = append(specs, named{"interleaved", "stride:2"}, named{"singletons", "singletons"})
	var out []Layout
	seen := map[string]int{}
	for _, s := range specs {
		l, err := ParseLayout(s.spec, n, hosts)
		if err != nil {
			continue
		}
		l.Spec = s.name
		if i, dup := seen[l.String()]; dup {
			// Checked once, under both names (pairs = halves on 4 ranks).
			out[i].Spec += " = " + s.name
			continue
		}
		seen[l.String()] = len(out)
		out = append(out, l)
	}
	return out
}

// rangeList writes [[lo..hi-1]] as a rank list.
func rangeList(lo, hi int) string {
	s := "[["
	for r := lo; r < hi; r++ {
		if r > lo {
			s += ","
		}
		s += strconv.Itoa(r)
	}
	return s + "]]"
}

// VerifyOptions tune verify-groups' full check.
type VerifyOptions struct {
	Sizes []int64
	// DTypes and Ops are what every group is checked with: by default a
	// float sum and max and an integer's (DefaultVerify).
	DTypes []dtype.DType
	Ops    []ReduceOp
	Seed   uint64
}

// DefaultVerify fills what o leaves empty: the types float and int32, the
// ops sum and max (a reduction in floating point and in integers, and
// one that is exact in any order).
func (o VerifyOptions) DefaultVerify() VerifyOptions {
	if len(o.DTypes) == 0 {
		o.DTypes = []dtype.DType{dtype.Float32, dtype.Int32}
	}
	if len(o.Ops) == 0 {
		o.Ops = []ReduceOp{Sum, Max}
	}
	return o
}

// simpleCount is the element count per rank (per peer for alltoall) of the
// rank r contributes r+1 check.
const simpleCount = 64

// VerifyGroups runs every collective inside every group of each layout:
// first with rank r contributing r+1 everywhere, then with the random
// patterns of the full check, and reports each layout's outcome.
//
// Every step reports each local rank's progress to the watchdog's board
// in ctx, if any, so that a run longer than the watchdog's timeout is not
// taken for a hang. When a step fails, the layout it was in says which
// step (LayoutVerify.Stopped) and the layouts not reached are listed as
// results.NotStarted.
func VerifyGroups(ctx context.Context, b Backend, w World, layouts []Layout, hosts []string, opts VerifyOptions) ([]results.LayoutVerify, error) {
	var out []results.LayoutVerify
	board := watchdog.BoardFrom(ctx)
	notStarted := func(rest []Layout) []results.LayoutVerify {
		for _, l := range rest {
			out = append(out, results.LayoutVerify{Name: l.Spec, Groups: l.Groups, Stopped: results.NotStarted})
		}
		return out
	}
	for i, l := range layouts {
		if err := ctx.Err(); err != nil {
			return notStarted(layouts[i:]), err
		}
		lv, err := verifyLayout(ctx, b, w, board, l, hosts, opts)
		out = append(out, lv)
		if err != nil {
			return notStarted(layouts[i+1:]), fmt.Errorf("layout %s: %w", l.Spec, err)
		}
	}
	for _, r := range w.Ranks() {
		board.For(r.WorldRank()).Begin("verify-groups", watchdog.Idle, 0)
	}
	return out, nil
}

// track puts every local rank of w on the board at what, in phase p.
func track(board *watchdog.Board, w World, what string, p watchdog.Phase) {
	for _, r := range w.Ranks() {
		board.For(r.WorldRank()).Begin(what, p, 1)
	}
}

// verifyLayout checks every collective in one layout of groups: each
// group's communicator, every element of every result.
func verifyLayout(ctx context.Context, b Backend, w World, board *watchdog.Board, l Layout, hosts []string, opts VerifyOptions) (lv results.LayoutVerify, err error) {
	n := w.Size()
	lv = results.LayoutVerify{Name: l.Spec, Groups: l.Groups}
	for r := 0; r < n; r++ {
		lv.Communicators = append(lv.Communicators, l.Info(r, hosts))
	}
	step := "forming its communicators"
	defer func() {
		if err != nil {
			lv.Stopped = step
		}
	}()
	gw := w
	if len(l.Groups) > 1 {
		track(board, w, "the communicators of layout "+l.Spec, watchdog.Setup)
		sw, err := w.Split(l)
		if err != nil {
			return lv, err
		}
		defer sw.Close()
		gw = sw
	}
	minGroup := n
	for _, g := range l.Groups {
		minGroup = min(minGroup, len(g))
	}
	for _, c := range AllCollectives() {
		cv := results.CollectiveVerify{Collective: c.String()}
		if err := CheckGroups([]Collective{c}, l.Groups); err != nil {
			cv.Pass, cv.Skipped = true, "needs groups whose sizes are powers of two"
			lv.Collectives = append(lv.Collectives, cv)
			continue
		}
		step = c.String() + ", rank r contributes r+1"
		track(board, gw, step+" in layout "+l.Spec, watchdog.Check)
		wrong, ms, before, err := simpleCheck(gw, l, c)
		if err != nil {
			return lv, fmt.Errorf("%s: %w", step, err)
		}
		cv.SimpleWrong = wrong
		cv.Mismatches = ms
		if c == AllReduce {
			lv.AllReduce = before
		}
		step = c.String() + ", full check"
		plan := Plan{Collectives: []Collective{c}, DTypes: opts.DTypes, Ops: opts.Ops, Sizes: opts.Sizes,
			Iters: 1, Warmup: 0, Check: 1, OutOfPlace: true, InPlace: true, Seed: opts.Seed, SkipUnsupported: true,
			// Values only: nothing is recorded. (NCCL 2.28.3's profiler,
			// recording these across simulated hosts, left destroys of
			// the group communicators hanging.)
			NoRecord: true}
		cases, err := plan.Cases(b, minGroup)
		if err != nil {
			return lv, err
		}
		rn := &Runner{World: w, Grouped: gw, Layout: l, Plan: plan, Cases: cases, Board: board}
		rows, err := rn.Run(ctx)
		if err != nil {
			return lv, fmt.Errorf("%s: %w", step, err)
		}
		for _, row := range rows {
			for _, h := range row.Halves() {
				if h.Wrong != nil {
					cv.PatternWrong += *h.Wrong
				}
				if len(cv.Mismatches) < 8 {
					cv.Mismatches = append(cv.Mismatches, h.Mismatches...)
				}
			}
		}
		cv.Pass = cv.SimpleWrong == 0 && cv.PatternWrong == 0
		lv.Collectives = append(lv.Collectives, cv)
	}
	return lv, nil
}

// simpleCheck runs c once in every group with rank r contributing r+1 (in
// float32) and compares every output element with its value computed from
// the group's members. It returns the wrong count, the first mismatches
// and, for allreduce, each rank's before and after.
func simpleCheck(gw World, l Layout, c Collective) (int64, []results.Mismatch, []results.BeforeAfter, error) {
	local := gw.Ranks()
	wrong := make([]int64, len(local))
	bad := make([][]results.Mismatch, len(local))
	ba := make([]results.BeforeAfter, len(local))
	pos := map[int]int{}
	for i, r := range local {
		pos[r.WorldRank()] = i
	}
	where := l.Positions()
	dt := dtype.Float32
	err := gw.Run(func(r Rank) error {
		i := pos[r.WorldRank()]
		members := l.Groups[where[r.WorldRank()][0]]
		k := len(members)
		count := int64(simpleCount)
		bytes := count * int64(k) * 4
		send, err := r.Alloc(bytes)
		if err != nil {
			return err
		}
		defer func() { _ = r.Free(send) }() // a free that fails changes no value checked
		recv, err := r.Alloc(bytes)
		if err != nil {
			return err
		}
		defer func() { _ = r.Free(recv) }()
		g := CallGeometry(Call{Coll: c, DType: dt, Count: count}, k)
		v := int64(r.WorldRank() + 1)
		p := Pattern{DType: dt, Domain: Domain{Kind: DomainRange, Lo: v, Hi: v}, Rank: r.Rank(), Ranks: k}
		if err := r.Fill(View{send, 0}, g.SendCount, p); err != nil {
			return err
		}
		if err := r.Poison(View{recv, 0}, g.RecvCount, dt); err != nil {
			return err
		}
		call := Call{Coll: c, DType: dt, Op: Sum, Root: 0, Count: count, Send: View{send, 0}, Recv: View{recv, 0}}
		if !c.Reduces() {
			call.Op = NoOp
		}
		if err := r.Launch(call); err != nil {
			return err
		}
		if err := r.Sync(); err != nil {
			return err
		}
		if (c == Reduce || c == Gather) && r.Rank() != 0 {
			return nil
		}
		hr, ok := r.(HostReader)
		if !ok {
			return fmt.Errorf("%w: this backend cannot read results back", ErrUnsupported)
		}
		data, err := hr.ReadHost(View{recv, 0}, g.RecvCount*4)
		if err != nil {
			return err
		}
		val := func(j int) float64 { return float64(members[j] + 1) }
		sum := 0.0
		for j := range members {
			sum += val(j)
		}
		q := r.Rank()
		out := g.RecvCount
		if c == AllToAllV {
			out = VRecvDispl(count, dt.Size(), k, q, k) // what this rank receives in all
		}
		for e := int64(0); e < out; e++ {
			want := specs[c].groupWant(e, count, dt.Size(), q, k, sum, val)
			got := dt.Get(data, e)
			if e == 0 && c == AllReduce {
				ba[i] = results.BeforeAfter{WorldRank: r.WorldRank(), Before: float64(v), After: got, Want: want}
			}
			if got != want {
				wrong[i]++
				if len(bad[i]) < mismatchLimit {
					bad[i] = append(bad[i], results.Mismatch{Rank: r.WorldRank(), Index: e,
						Want: strconv.FormatFloat(want, 'g', -1, 64), Got: strconv.FormatFloat(got, 'g', -1, 64)})
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, nil, err
	}
	type part struct {
		Wrong  int64                 `json:"w"`
		Bad    []results.Mismatch    `json:"b"`
		Before []results.BeforeAfter `json:"a"`
	}
	mine := part{Before: ba}
	for i := range local {
		mine.Wrong += wrong[i]
		mine.Bad = append(mine.Bad, bad[i]...)
	}
	parts := []part{mine}
	if d, ok := gw.(Distributed); ok && d.Control() != nil {
		blob, _ := json.Marshal(mine)
		all, err := d.Control().AllGather(blob)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("gathering results: %w", err)
		}
		parts = parts[:0]
		for _, b := range all {
			var p part
			if err := json.Unmarshal(b, &p); err != nil {
				return 0, nil, nil, fmt.Errorf("gathering results: %w", err)
			}
			parts = append(parts, p)
		}
	}
	var total int64
	var ms []results.Mismatch
	var before []results.BeforeAfter
	for _, p := range parts {
		total += p.Wrong
		ms = append(ms, p.Bad...)
		before = append(before, p.Before...)
	}
	sort.Slice(before, func(a, b int) bool { return before[a].WorldRank < before[b].WorldRank })
	if c != AllReduce {
		before = nil
	}
	return total, ms, before, nil
}
