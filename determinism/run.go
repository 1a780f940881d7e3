package determinism

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"collbench/dtype"
	"collbench/measure"
	"collbench/tunefile"
)

// Spec is what a determinism run measures: each collective, type and
// choice (the library's own and every algorithm it can be forced to run)
// over the sizes, Runs times on fresh communicators, with random inputs of
// Seed.
type Spec struct {
	Collectives []measure.Collective
	DTypes      []dtype.DType
	Sizes       []int64
	Runs        int
	Seed        uint64
	// DefaultOnly leaves out the forced choices.
	DefaultOnly bool
	// CheckFile names a tuner file whose choices are run instead, each size
	// with the choice the file names for it; any divergence fails.
	CheckFile string
	// Budget, where set, bounds the run's wall time: no collective, type
	// and choice starts once it is spent (what was measured is kept).
	Budget time.Duration
}

// Check refuses what determinism cannot judge, in the user's words.
func (s Spec) Check() error {
	if s.Budget < 0 {
		return fmt.Errorf("--budget %v: give the run some time, e.g. --budget 10m, or 0 for no limit", s.Budget)
	}
	if s.Runs < 2 {
		return fmt.Errorf("--runs %d: run to run needs at least 2 runs (3 is the default)", s.Runs)
	}
	for _, c := range s.Collectives {
		if !c.Reduces() {
			return fmt.Errorf("%s moves data without reducing it: its bits cannot depend on an order; give allreduce, reduce-scatter or reduce", c)
		}
	}
	for _, t := range s.DTypes {
		if !t.IsFloat() {
			return fmt.Errorf("%s is an integer type: its sums are exact in any order, so there is nothing to find; give float, half, bfloat16 or double", t)
		}
	}
	if len(s.Sizes) == 0 || len(s.Collectives) == 0 || len(s.DTypes) == 0 {
		return errors.New("determinism needs a collective, a type and a size")
	}
	return nil
}

// Options is a determinism run on a world the caller opened.
type Options struct {
	Spec
	World measure.World
	// Forcer tells the library which algorithm to run (nil: the default
	// only); Vocab is its words (the report's backend's where left zero),
	// Entries a tuner file's lines (CheckFile, read by tune.ReadCheck).
	Forcer  measure.Forcer
	Vocab   tunefile.Vocabulary
	Entries []tunefile.Entry
	N       int
	Rank0   bool
	// OnRecord, if set, receives the record's JSON writer after every
	// cell (rank 0), so what was measured reaches disk as it is measured.
	OnRecord func(writeJSON func(io.Writer) error)
	// Progress, if set, receives a line per collective, type and choice.
	Progress func(string)
}

// RefusedError is a choice the library refused to be forced to: the
// user's to change.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Run measures o into rep: on rank 0 rep gets every cell as it is
// measured (another process's rep stays empty).
func Run(ctx context.Context, o Options, rep *Report) error {
	all, err := measure.ParseLayout("all", o.N, nil)
	if err != nil {
		return err
	}
	if o.Vocab.Backend == "" {
		o.Vocab = tunefile.VocabularyOf(rep.Backend)
	}
	dr := &determiner{d: o, world: o.World, forcer: o.Forcer, n: o.N, all: all, rep: rep, rank0: o.Rank0, vocab: o.Vocab, entries: o.Entries}
	return dr.run(ctx)
}

// maxULPElems bounds the elements per rank and size whose distance from the
// exact sum is computed (the reference costs a sum over the ranks each).
const maxULPElems = 1 << 22

type determiner struct {
	d     Options
	sizes []int64 // the sizes of the choice being run
	// entries are a tuner file's lines (--check): each size runs the
	// choice the file names for it.
	entries []tunefile.Entry
	vocab   tunefile.Vocabulary
	world   measure.World
	forcer  measure.Forcer
	n       int
	all     measure.Layout
	rep     *Report
	rank0   bool
}

// rankCell is what one rank found for one size of one choice.
type rankCell struct {
	Rank    int         `json:"rank"`
	Size    int64       `json:"size"`
	Digest  uint64      `json:"digest"`
	Holds   bool        `json:"holds"` // the rank holds a result (reduce: the root only)
	Run     *Divergence `json:"run,omitempty"`
	SizeDiv *Divergence `json:"size_div,omitempty"`
	Hist    *Divergence `json:"hist,omitempty"`
	MaxULP  uint64      `json:"max_ulp"`
	TimesUS []float64   `json:"times_us"`
	bytes   []byte      // run 1's output, kept in this process
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
					return err
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
					if ch == Default {
						algo = ""
					}
					if err := dr.forcer.Force(c, algo); err != nil {
						return &RefusedError{Err: err}
					}
				}
				cells, err := dr.choice(ctx, c, t)
				if err != nil {
					return err
				}
				why, err := dr.notRun(c, ch)
				if err != nil {
					return err
				}
				if why != "" {
					if dr.rank0 {
						dr.rep.Notes = append(dr.rep.Notes, fmt.Sprintf("%s %s: %s cannot run here (%s): left out", c, t, ch, why))
					}
					continue
				}
				if err := dr.gather(c, t, ch, cells); err != nil {
					return err
				}
			}
		}
		if dr.forcer != nil {
			if err := dr.forcer.Force(c, ""); err != nil {
				return &RefusedError{Err: err}
			}
		}
	}
	return nil
}

// notRun says why the operations of forced choice ch of c ran another
// choice (NCCL's table may say a pair cannot run here, and NCCL then runs
// its own): those cells describe what the library chose, not ch, and are
// left out, never pinned. Rank 0's answer is every process's.
func (dr *determiner) notRun(c measure.Collective, ch string) (string, error) {
	fr, ok := dr.forcer.(measure.ForceReporter)
	if !ok || ch == Default {
		return "", nil
	}
	why := ""
	if ran, w := fr.Forced(c); !ran {
		why = w
	}
	err := measure.Agree(measure.ControlOf(dr.world), &why)
	return why, err
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
		add(Default, dr.d.Sizes...)
		if dr.forcer != nil && !dr.d.DefaultOnly {
			for _, ch := range dr.forcer.Choices(c, dr.n) {
				add(ch, dr.d.Sizes...)
			}
		}
		return choices, sizes
	}
	for _, s := range dr.d.Sizes {
		ch := Default
		if e, ok := tunefile.Match(dr.entries, strings.ReplaceAll(c.String(), "-", ""), s, dr.n, -1); ok {
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
			return nil, err
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
					el, x := FirstDiff(t, rc.bytes, out, dr.offset(c, r.Rank(), size, t))
					rc.Run = &Divergence{Check: "run", Run: run, Rank: r.Rank(), Element: el, Bits: x}
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
		return err
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
				el, x := FirstDiff(t, rc.bytes, out, dr.offset(c, r.Rank(), dr.sizes[k], t))
				rc.Hist = &Divergence{Check: "history", Run: run, Rank: r.Rank(), Element: el, Bits: x}
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
	rc.Digest, rc.bytes = Hash(out), out
	off, esz := dr.offset(c, rank, size, t), int64(t.Size())
	count := int64(len(out)) / esz
	ref := make([]float64, min(count, maxULPElems))
	round, dom := Rounder(t), measure.Domain{Kind: measure.DomainRandom}
	for i := range ref {
		for j := 0; j < dr.n; j++ {
			ref[i] += round(dom.Value(dr.d.Seed, j, dr.n, off+int64(i)))
		}
	}
	rc.MaxULP = ULPs(t, out, ref)
	if len(before) > 0 && before[len(before)-1].Holds {
		p := before[len(before)-1]
		pOff := dr.offset(c, rank, p.Size, t)
		// The elements this rank held at both sizes: [lo, hi) of the vector.
		lo, hi := max(off, pOff), min(off+count, pOff+int64(len(p.bytes))/esz)
		if lo < hi {
			a, b := p.bytes[(lo-pOff)*esz:(hi-pOff)*esz], out[(lo-off)*esz:(hi-off)*esz]
			if el, x := FirstDiff(t, a, b, lo); el >= 0 {
				rc.SizeDiv = &Divergence{Check: "size", Run: 1, Rank: rank, Element: el, Bits: x}
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
			return err
		}
		if !dr.rank0 {
			return nil
		}
		ranks = nil
		for _, p := range parts {
			var rs []*rankCell
			if err := json.Unmarshal(p, &rs); err != nil {
				return fmt.Errorf("a process's determinism cells: %v", err)
			}
			ranks = append(ranks, rs...)
		}
	}
	if !dr.rank0 {
		return nil
	}
	for _, size := range dr.sizes {
		cell := Cell{Collective: c.String(), DType: t.String(), Size: size, Choice: ch, Runs: dr.d.Runs,
			RunToRun: Same, Ranks: NA, SizeInvariant: NA, History: Same}
		if c == measure.AllReduce {
			cell.Ranks = Same
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
			if rc.Run != nil && cell.RunToRun == Same {
				cell.RunToRun = Differs
				cell.Divergences = append(cell.Divergences, *rc.Run)
			}
			if rc.Hist != nil && cell.History == Same {
				cell.History = Differs
				cell.Divergences = append(cell.Divergences, *rc.Hist)
			}
			if size != dr.sizes[0] && cell.SizeInvariant != Differs {
				cell.SizeInvariant = Same
				if rc.SizeDiv != nil {
					cell.SizeInvariant = Differs
					cell.Divergences = append(cell.Divergences, *rc.SizeDiv)
				}
			}
			if c == measure.AllReduce && r0 != nil && rc.Rank != 0 && rc.Digest != r0.Digest && cell.Ranks == Same {
				cell.Ranks = Differs
				div := Divergence{Check: "ranks", Run: 1, Rank: rc.Rank, Element: -1}
				a, b := bytesOf[[2]int64{0, size}], bytesOf[[2]int64{int64(rc.Rank), size}]
				if a != nil && b != nil {
					div.Element, div.Bits = FirstDiff(t, a, b, 0)
				}
				cell.Divergences = append(cell.Divergences, div)
			}
		}
		cell.Digest = fmt.Sprintf("%016x", Hash([]byte(strings.Join(digests, ","))))
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
