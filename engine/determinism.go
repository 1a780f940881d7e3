package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"collbench/determinism"
	"collbench/dtype"
	"collbench/internal/words"
	"collbench/measure"
	"collbench/tune"
)

// Determinism is one collbench determinism run: each collective, type and
// choice (the library's own and every algorithm it can be forced to run)
// over the sizes, Runs times on fresh communicators, with random inputs of
// Seed.
type Determinism struct {
	Collectives []measure.Collective
	DTypes      []dtype.DType
	Sizes       []int64
	Runs        int
	Seed        uint64
	// DefaultOnly leaves out the forced choices.
	DefaultOnly bool
	// TunerFile: a tuner file is asked for (refused on NCCL before any
	// measuring: see RunDeterminism).
	TunerFile bool
	// CheckFile names a tuner file whose choices are run instead, each size
	// with the choice the file names for it; any divergence fails.
	CheckFile string
	// Budget, where set, bounds the run's wall time: no collective, type
	// and choice starts once it is spent (what was measured is kept).
	Budget           time.Duration
	Backend, NCCLLib string
	Ranks            int
	RunFlags
	Tool string
	// OnRecord, if set, receives the record's JSON writer after every
	// cell (rank 0), so what was measured reaches disk as it is measured.
	OnRecord func(writeJSON func(io.Writer) error)
	// Progress, if set, receives a line per collective, type and choice.
	Progress func(string)
}

// maxULPElems bounds the elements per rank and size whose distance from the
// exact sum is computed (the reference costs a sum over the ranks each).
const maxULPElems = 1 << 22

// ParseDTypes parses a comma list of element types; an unknown one is a
// UsageError.
func ParseDTypes(s string) ([]dtype.DType, error) {
	var out []dtype.DType
	for _, part := range strings.Split(s, ",") {
		t, err := dtype.Parse(part)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		out = append(out, t)
	}
	return out, nil
}

// Check refuses what determinism cannot judge, before any backend starts.
func (d Determinism) Check() error {
	if d.Budget < 0 {
		return UsageErrorf("--budget %v: give the run some time, e.g. --budget 10m, or 0 for no limit", d.Budget)
	}
	if d.Runs < 2 {
		return UsageErrorf("--runs %d: run to run needs at least 2 runs (3 is the default)", d.Runs)
	}
	for _, c := range d.Collectives {
		if !c.Reduces() {
			return UsageErrorf("%s moves data without reducing it: its bits cannot depend on an order; give allreduce, reduce-scatter or reduce", c)
		}
	}
	for _, t := range d.DTypes {
		if !t.IsFloat() {
			return UsageErrorf("%s is an integer type: its sums are exact in any order, so there is nothing to find; give float, half, bfloat16 or double", t)
		}
	}
	if len(d.Sizes) == 0 || len(d.Collectives) == 0 || len(d.DTypes) == 0 {
		return UsageErrorf("determinism needs a collective, a type and a size")
	}
	return nil
}

// RunDeterminism runs d and returns the report on rank 0 (nil elsewhere),
// with every cell measured so far even when the error is not nil.
func (f *System) RunDeterminism(ctx context.Context, d Determinism) (_ *determinism.Report, err error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	gr, err := f.begin(ctx, d.Backend, d.NCCLLib, d.Ranks, d.RunFlags, nil)
	if err != nil {
		return nil, err
	}
	defer func() { gr.end(err) }()
	ss := gr.SS
	b, n, rank0 := ss.Choice.Backend, ss.N, ss.PW.Rank0()
	if d.TunerFile && b.Name() != "cpu" {
		// NCCL's example tuner plugin runs a line without a channel count
		// on one channel, and determinism does not record NCCL's channels.
		return nil, UsageErrorf("--tuner-file is written for the cpu backend only for now: NCCL's example tuner plugin would run its lines (no channel count recorded) on one channel; use the matrix and -o")
	}
	for _, c := range d.Collectives {
		for _, t := range d.DTypes {
			if err := b.Supports(c, t, measure.Sum); err != nil {
				return nil, UsageErrorf("the %s backend cannot run %s on %s: %v", b.Name(), c, t, err)
			}
		}
	}
	if p, ok := b.(measure.ForcePreparer); ok && !d.DefaultOnly {
		if err := p.PrepareForcing(); err != nil {
			d.DefaultOnly = true
		}
	}
	if err := f.open(gr, d.RunFlags); err != nil {
		return nil, err
	}
	world := gr.World
	rep := &determinism.Report{Schema: determinism.Schema, Tool: d.Tool, Backend: b.Name(), Ranks: n, Runs: d.Runs, Seed: d.Seed, Started: f.Now(), Complete: true}
	forcer, _ := world.(measure.Forcer)
	if forcer == nil && !d.DefaultOnly {
		rep.Notes = append(rep.Notes, "only the library's own choice: "+b.Name()+" cannot be told which algorithm to run here")
	}
	all, err := measure.ParseLayout("all", n, nil)
	if err != nil {
		return nil, err
	}
	dr := &determiner{d: d, world: world, forcer: forcer, n: n, all: all, rep: rep, rank0: rank0, vocab: tune.VocabularyOf(b.Name())}
	if d.CheckFile != "" {
		if forcer == nil {
			return nil, UsageErrorf("--check %s: the %s backend cannot be told which algorithm to run here", d.CheckFile, b.Name())
		}
		if dr.entries, err = readTunerFile(gr.Ctx, d.CheckFile, dr.vocab); err != nil {
			return nil, err
		}
		rep.Notes = append(rep.Notes, "checking "+d.CheckFile+": each size runs the choice the file names for it (the default where no line does)")
	}
	runErr := dr.run(gr.Ctx)
	runErr = gr.settle(runErr, len(rep.Cells))
	rep.Finished = f.Now()
	if !rank0 {
		return nil, runErr
	}
	if runErr != nil {
		rep.Complete = false
		return rep, runErr
	}
	if d.CheckFile != "" {
		var bad []string
		for _, c := range rep.Cells {
			if !c.Stable() {
				bad = append(bad, fmt.Sprintf("%s %s %s with %s", c.Collective, c.DType, words.Bytes(c.Size), c.Choice))
			}
		}
		if len(bad) > 0 {
			return rep, &CheckFailedError{Msg: fmt.Sprintf("determinism --check %s: %d of %d cells diverged (first: %s)", d.CheckFile, len(bad), len(rep.Cells), bad[0])}
		}
	}
	return rep, nil
}

type determiner struct {
	d     Determinism
	sizes []int64 // the sizes of the choice being run
	// entries are a tuner file's lines (--check): each size runs the
	// choice the file names for it.
	entries []tune.Entry
	vocab   tune.Vocabulary
	world   measure.World
	forcer  measure.Forcer
	n       int
	all     measure.Layout
	rep     *determinism.Report
	rank0   bool
}

// rankCell is what one rank found for one size of one choice.
type rankCell struct {
	Rank    int                     `json:"rank"`
	Size    int64                   `json:"size"`
	Digest  uint64                  `json:"digest"`
	Holds   bool                    `json:"holds"` // the rank holds a result (reduce: the root only)
	Run     *determinism.Divergence `json:"run,omitempty"`
	SizeDiv *determinism.Divergence `json:"size_div,omitempty"`
	Hist    *determinism.Divergence `json:"hist,omitempty"`
	MaxULP  uint64                  `json:"max_ulp"`
	TimesUS []float64               `json:"times_us"`
	bytes   []byte                  // run 1's output, kept in this process
}

func (dr *determiner) run(ctx context.Context) error {
	var deadline time.Time
	if dr.d.Budget > 0 {
		deadline = time.Now().Add(dr.d.Budget)
	}
	for _, c := range dr.d.Collectives {
		choices, sizes := dr.choicesFor(c)
		for _, t := range dr.d.DTypes {
			for _, ch := range choices {
				dr.sizes = sizes[ch]
				if err := ctx.Err(); err != nil {
					return err
				}
				// Rank 0's clock decides, so every process stops alike.
				spent := !deadline.IsZero() && time.Now().After(deadline)
				if err := measure.Agree(measure.ControlOf(dr.world), &spent); err != nil {
					return &RunError{Err: err}
				}
				if spent {
					dr.rep.Complete = false
					dr.rep.Notes = append(dr.rep.Notes, fmt.Sprintf("--budget %v spent: %s %s with %s and what follows were not run", dr.d.Budget, c, t, ch))
					return nil
				}
				if dr.d.Progress != nil && dr.rank0 {
					dr.d.Progress(fmt.Sprintf("%s %s with %s: %d runs of %d sizes", c, t, ch, dr.d.Runs, len(dr.sizes)))
				}
				if dr.forcer != nil {
					algo := ch
					if ch == determinism.Default {
						algo = ""
					}
					if err := dr.forcer.Force(c, algo); err != nil {
						return &UsageError{Err: err}
					}
				}
				cells, err := dr.choice(ctx, c, t)
				if err != nil {
					return err
				}
				if err := dr.gather(c, t, ch, cells); err != nil {
					return err
				}
			}
		}
		if dr.forcer != nil {
			if err := dr.forcer.Force(c, ""); err != nil {
				return &UsageError{Err: err}
			}
		}
	}
	return nil
}

// choicesFor lists the choices to run c with, and the sizes of each: the
// default and every forced choice at every size, or, checking a tuner
// file, the choice the file names at each size (the default where no line
// does).
func (dr *determiner) choicesFor(c measure.Collective) ([]string, map[string][]int64) {
	sizes := map[string][]int64{}
	var choices []string
	add := func(ch string, s ...int64) {
		if _, ok := sizes[ch]; !ok {
			choices = append(choices, ch)
		}
		sizes[ch] = append(sizes[ch], s...)
	}
	if dr.d.CheckFile == "" {
		add(determinism.Default, dr.d.Sizes...)
		if dr.forcer != nil && !dr.d.DefaultOnly {
			for _, ch := range dr.forcer.Choices(c, dr.n) {
				add(ch, dr.d.Sizes...)
			}
		}
		return choices, sizes
	}
	for _, s := range dr.d.Sizes {
		ch := determinism.Default
		if e, ok := tune.Match(dr.entries, strings.ReplaceAll(c.String(), "-", ""), s, dr.n, -1); ok {
			ch = e.Algorithm
			if len(dr.vocab.Protocols) > 1 {
				ch += "/" + e.Protocol
			}
		}
		add(ch, s)
	}
	return choices, sizes
}

// choice runs one collective, type and choice: Runs runs, each on a fresh
// communicator, of every size; it returns each local rank's cells by size.
func (dr *determiner) choice(ctx context.Context, c measure.Collective, t dtype.DType) (map[int][]*rankCell, error) {
	cells := map[int][]*rankCell{}
	var mu sync.Mutex
	for run := 1; run <= dr.d.Runs; run++ {
		sub, err := dr.world.Split(dr.all)
		if err != nil {
			return nil, &RunError{Err: err}
		}
		err = sub.Run(func(r measure.Rank) error {
			for i, size := range dr.sizes {
				if err := ctx.Err(); err != nil {
					return err
				}
				out, took, err := dr.call(r, c, t, size, dr.d.Seed)
				if err != nil {
					return err
				}
				if run == 1 {
					mu.Lock()
					before := cells[r.Rank()]
					mu.Unlock()
					rc := dr.first(r.Rank(), c, t, size, out, before)
					mu.Lock()
					cells[r.Rank()] = append(before, rc)
					mu.Unlock()
				}
				mu.Lock()
				rc := cells[r.Rank()][i]
				mu.Unlock()
				rc.TimesUS = append(rc.TimesUS, took)
				if run > 1 && rc.Run == nil && rc.Holds && !slices.Equal(out, rc.bytes) {
					el, x := determinism.FirstDiff(t, rc.bytes, out, dr.offset(c, r.Rank(), size, t))
					rc.Run = &determinism.Divergence{Check: "run", Run: run, Rank: r.Rank(), Element: el, Bits: x}
				}
			}
			return nil
		})
		if cerr := sub.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return cells, err
		}
	}
	return cells, dr.history(ctx, c, t, cells)
}

// history runs once more on a fresh communicator with another past: the
// sizes largest first, each call after one of the largest size on other
// inputs; an output that differs from run 1's depends on what ran before
// it (the class of NCCL's NVLS reductions).
func (dr *determiner) history(ctx context.Context, c measure.Collective, t dtype.DType, cells map[int][]*rankCell) error {
	sub, err := dr.world.Split(dr.all)
	if err != nil {
		return &RunError{Err: err}
	}
	var mu sync.Mutex
	run := dr.d.Runs + 1
	largest := dr.sizes[len(dr.sizes)-1]
	err = sub.Run(func(r measure.Rank) error {
		mu.Lock()
		mine := cells[r.Rank()]
		mu.Unlock()
		for k := len(dr.sizes) - 1; k >= 0; k-- {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, _, err := dr.call(r, c, t, largest, dr.d.Seed+1); err != nil {
				return err
			}
			out, _, err := dr.call(r, c, t, dr.sizes[k], dr.d.Seed)
			if err != nil {
				return err
			}
			if rc := mine[k]; rc.Holds && rc.Hist == nil && !slices.Equal(out, rc.bytes) {
				el, x := determinism.FirstDiff(t, rc.bytes, out, dr.offset(c, r.Rank(), dr.sizes[k], t))
				rc.Hist = &determinism.Divergence{Check: "history", Run: run, Rank: r.Rank(), Element: el, Bits: x}
			}
		}
		return nil
	})
	if cerr := sub.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// offset is the index in the reduced vector of a rank's first output
// element at size.
func (dr *determiner) offset(c measure.Collective, rank int, size int64, t dtype.DType) int64 {
	if c == measure.ReduceScatter {
		return int64(rank) * measure.GeometryFor(c, size, t.Size(), dr.n, rank).RecvCount
	}
	return 0
}

// first makes a rank's cell from run 1's output: its digest, its distance
// from the exact sum, and the elements it held at the size before.
func (dr *determiner) first(rank int, c measure.Collective, t dtype.DType, size int64, out []byte, before []*rankCell) *rankCell {
	holds := c != measure.Reduce || rank == 0
	rc := &rankCell{Rank: rank, Size: size, Holds: holds}
	if !holds {
		return rc
	}
	rc.Digest, rc.bytes = determinism.Hash(out), out
	off, esz := dr.offset(c, rank, size, t), int64(t.Size())
	count := int64(len(out)) / esz
	ref := make([]float64, min(count, maxULPElems))
	round, dom := determinism.Rounder(t), measure.Domain{Kind: measure.DomainRandom}
	for i := range ref {
		for j := 0; j < dr.n; j++ {
			ref[i] += round(dom.Value(dr.d.Seed, j, dr.n, off+int64(i)))
		}
	}
	rc.MaxULP = determinism.ULPs(t, out, ref)
	if len(before) > 0 && before[len(before)-1].Holds {
		p := before[len(before)-1]
		pOff := dr.offset(c, rank, p.Size, t)
		// The elements this rank held at both sizes: [lo, hi) of the vector.
		lo, hi := max(off, pOff), min(off+count, pOff+int64(len(p.bytes))/esz)
		if lo < hi {
			a, b := p.bytes[(lo-pOff)*esz:(hi-pOff)*esz], out[(lo-off)*esz:(hi-off)*esz]
			if el, x := determinism.FirstDiff(t, a, b, lo); el >= 0 {
				rc.SizeDiv = &determinism.Divergence{Check: "size", Run: 1, Rank: rank, Element: el, Bits: x}
			}
		}
	}
	return rc
}

// call runs one operation of c on t at size with random inputs and returns
// the rank's output bytes and the call's time in µs.
func (dr *determiner) call(r measure.Rank, c measure.Collective, t dtype.DType, size int64, seed uint64) ([]byte, float64, error) {
	g := measure.GeometryFor(c, size, t.Size(), r.Size(), r.Rank())
	esz := int64(t.Size())
	send, err := r.Alloc(max(g.SendCount*esz, 1))
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = r.Free(send) }()
	recv, err := r.Alloc(max(g.RecvCount*esz, 1))
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = r.Free(recv) }()
	p := measure.Pattern{DType: t, Domain: measure.Domain{Kind: measure.DomainRandom}, Seed: seed, Rank: r.Rank(), Ranks: r.Size()}
	if err := r.Fill(measure.View{Buf: send}, g.SendCount, p); err != nil {
		return nil, 0, err
	}
	if err := r.Poison(measure.View{Buf: recv}, g.RecvCount, t); err != nil {
		return nil, 0, err
	}
	if err := r.Sync(); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	if err := r.Launch(measure.Call{Coll: c, DType: t, Op: measure.Sum, Root: 0, Count: g.Count, Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}}); err != nil {
		return nil, 0, err
	}
	if err := r.Sync(); err != nil {
		return nil, 0, err
	}
	took := float64(time.Since(start).Nanoseconds()) / 1e3
	hr, ok := r.(measure.HostReader)
	if !ok {
		return nil, 0, fmt.Errorf("the backend cannot read its outputs back to the host")
	}
	out, err := hr.ReadHost(measure.View{Buf: recv}, g.RecvCount*esz)
	return out, took, err
}

// gather brings every rank's cells to rank 0 and adds one report cell per
// size: run to run, ranks (allreduce) and size invariance, with the first
// divergence of each.
func (dr *determiner) gather(c measure.Collective, t dtype.DType, ch string, local map[int][]*rankCell) error {
	var ranks []*rankCell
	for _, cs := range local {
		ranks = append(ranks, cs...)
	}
	bytesOf := map[[2]int64][]byte{} // (rank, size) -> run 1's bytes, where local
	for _, rc := range ranks {
		bytesOf[[2]int64{int64(rc.Rank), rc.Size}] = rc.bytes
	}
	var ctl measure.Control
	if dw, ok := dr.world.(measure.Distributed); ok {
		ctl = dw.Control() // nil in a world of one process
	}
	if ctl != nil && ctl.Size() > 1 {
		data, err := json.Marshal(ranks)
		if err != nil {
			return err
		}
		parts, err := ctl.Gather(data)
		if err != nil {
			return &RunError{Err: err}
		}
		if !dr.rank0 {
			return nil
		}
		ranks = nil
		for _, p := range parts {
			var rs []*rankCell
			if err := json.Unmarshal(p, &rs); err != nil {
				return &RunError{Err: fmt.Errorf("a process's determinism cells: %v", err)}
			}
			ranks = append(ranks, rs...)
		}
	}
	if !dr.rank0 {
		return nil
	}
	for _, size := range dr.sizes {
		cell := determinism.Cell{Collective: c.String(), DType: t.String(), Size: size, Choice: ch, Runs: dr.d.Runs,
			RunToRun: determinism.Same, Ranks: determinism.NA, SizeInvariant: determinism.NA, History: determinism.Same}
		if c == measure.AllReduce {
			cell.Ranks = determinism.Same
		}
		var digests []string
		var times []float64
		var r0 *rankCell
		for _, rc := range ranks {
			if rc.Size == size && rc.Rank == 0 {
				r0 = rc
			}
		}
		byRank := slices.Clone(ranks)
		slices.SortFunc(byRank, func(a, b *rankCell) int { return a.Rank - b.Rank })
		for _, rc := range byRank {
			if rc.Size != size {
				continue
			}
			times = append(times, rc.TimesUS...)
			if !rc.Holds {
				continue
			}
			digests = append(digests, fmt.Sprintf("%016x", rc.Digest))
			cell.MaxULP = max(cell.MaxULP, rc.MaxULP)
			if rc.Run != nil && cell.RunToRun == determinism.Same {
				cell.RunToRun = determinism.Differs
				cell.Divergences = append(cell.Divergences, *rc.Run)
			}
			if rc.Hist != nil && cell.History == determinism.Same {
				cell.History = determinism.Differs
				cell.Divergences = append(cell.Divergences, *rc.Hist)
			}
			if size != dr.sizes[0] && cell.SizeInvariant != determinism.Differs {
				cell.SizeInvariant = determinism.Same
				if rc.SizeDiv != nil {
					cell.SizeInvariant = determinism.Differs
					cell.Divergences = append(cell.Divergences, *rc.SizeDiv)
				}
			}
			if c == measure.AllReduce && r0 != nil && rc.Rank != 0 && rc.Digest != r0.Digest && cell.Ranks == determinism.Same {
				cell.Ranks = determinism.Differs
				div := determinism.Divergence{Check: "ranks", Run: 1, Rank: rc.Rank, Element: -1}
				a, b := bytesOf[[2]int64{0, size}], bytesOf[[2]int64{int64(rc.Rank), size}]
				if a != nil && b != nil {
					div.Element, div.Bits = determinism.FirstDiff(t, a, b, 0)
				}
				cell.Divergences = append(cell.Divergences, div)
			}
		}
		cell.Digest = fmt.Sprintf("%016x", determinism.Hash([]byte(strings.Join(digests, ","))))
		slices.Sort(times)
		if len(times) > 0 {
			cell.TimeUS = times[len(times)/2]
		}
		dr.rep.Cells = append(dr.rep.Cells, cell)
	}
	if dr.d.OnRecord != nil {
		dr.d.OnRecord(dr.rep.WriteJSON)
	}
	return nil
}
