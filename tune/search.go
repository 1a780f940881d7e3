package tune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"collbench/internal/words"
)

// Choice is one way to run a collective: NCCL's algorithm and protocol by
// the tuner file's names, a channel count (-1: NCCL's own), and a chunk
// size where NCCL takes one (2.30 and later): Chunk bytes, or ChunkX times
// the chunk NCCL computes (both 0: NCCL's own). The zero Choice with
// Default set is NCCL's own choice, unforced.
type Choice struct {
	Algorithm string  `json:"algorithm,omitempty"`
	Protocol  string  `json:"protocol,omitempty"`
	Channels  int     `json:"channels,omitempty"`
	Chunk     int64   `json:"chunk_bytes,omitempty"`
	ChunkX    float64 `json:"chunk_factor,omitempty"`
	Default   bool    `json:"default,omitempty"`
}

// String names the choice as tables show it: algorithm/protocol, with
// the channels and the chunk where forced; "default" for the library's
// own.
func (c Choice) String() string {
	if c.Default {
		return "default"
	}
	s := c.Algorithm + "/" + c.Protocol
	if c.Channels > 0 {
		s += fmt.Sprintf("/%dch", c.Channels)
	}
	switch {
	case c.ChunkX > 0:
		s += fmt.Sprintf("/chunk×%g", c.ChunkX)
	case c.Chunk > 0:
		s += "/chunk " + words.Bytes(c.Chunk)
	}
	return s
}

// Cell is one choice measured at one size: its times over repeats (µs),
// the best of which it reports with the repeats' spread.
type Cell struct {
	Choice  Choice    `json:"choice"`
	TimesUS []float64 `json:"times_us"`
	// Ran is what the library's recorder saw it run (NCCL's profiler
	// plugin: NCCL's own choice for the default), where it recorded.
	Ran *Choice `json:"ran,omitempty"`
	// ChunkBytes is the chunk size it ran with where it forced one (NCCL
	// 2.30 and later: the plugin's answer to NCCL).
	ChunkBytes int64 `json:"chunk_ran_bytes,omitempty"`
}

// Time is the cell's median time (µs).
func (c Cell) Time() float64 {
	if len(c.TimesUS) == 0 {
		return math.Inf(1)
	}
	ts := slices.Sorted(slices.Values(c.TimesUS))
	n := len(ts)
	return (ts[(n-1)/2] + ts[n/2]) / 2
}

// Noise is the cell's relative spread: half its range over its median
// (0 with fewer than two repeats).
func (c Cell) Noise() float64 {
	if len(c.TimesUS) < 2 {
		return 0
	}
	lo, hi := slices.Min(c.TimesUS), slices.Max(c.TimesUS)
	return (hi - lo) / 2 / c.Time()
}

// MinNoise is the least noise a cell is assumed to carry, measured or not:
// identical runs on the lent GPUs differ by about 1% (docs/parity.md).
const MinNoise = 0.01

// Beats says whether a is faster than b beyond the noise of both: its
// median time below b's by more than the sum of their relative spreads
// (each at least MinNoise). The gain is b's time over a's, minus 1.
func Beats(a, b Cell) (bool, float64) {
	ta, tb := a.Time(), b.Time()
	if math.IsInf(ta, 1) || math.IsInf(tb, 1) || ta <= 0 {
		return false, 0
	}
	gain := tb/ta - 1
	return gain > max(a.Noise(), MinNoise)+max(b.Noise(), MinNoise), gain
}

// Measure measures one choice at one size, repeats times, and returns
// its times (µs); an error for a choice NCCL refuses ends that choice, not
// the search (ErrRefused), any other error ends the search.
type Measure func(ctx context.Context, c Choice, size int64, repeats int) ([]float64, error)

// ErrRefused is what a Measure returns for a choice the library does not
// run at that size (an algorithm it does not support there).
var ErrRefused = fmt.Errorf("the library refuses this choice here")

// ErrIsDefault is what a Measure returns for a choice that is what the
// library runs by default at that size: measured once, as the default, so
// that two cells of one algorithm never differ by chance into a claimed
// gain.
var ErrIsDefault = fmt.Errorf("this choice is the library's own here")

// Result is the search at one size: every cell measured, NCCL's own, and
// the best; Gain is the best's over NCCL's when it is beyond the noise
// (0 where NCCL's choice is best, or within noise of the best).
type Result struct {
	Size     int64   `json:"size_bytes"`
	Cells    []Cell  `json:"cells"`
	Default  Cell    `json:"default"`
	Best     Cell    `json:"best"`
	Gain     float64 `json:"gain"`
	Refined  bool    `json:"refined"`  // the leaders were measured again
	Complete bool    `json:"complete"` // every candidate was measured within the budget
	// Pairs are the default's and the best's times measured one right
	// after the other (µs, in pairs): a gain stands only where the pairs
	// confirm it (PairedBeats), since small messages on a shared host
	// move between latency bands from one minute to the next and two
	// medians taken minutes apart can differ by a band.
	Pairs [][2]float64 `json:"pairs,omitempty"`
	// Confirmed says the pairs confirmed the gain; false with pairs where
	// they did not (the gain is then 0).
	Confirmed bool `json:"confirmed,omitempty"`
}

// MinPairs is how many pairs a gain must be confirmed by.
const MinPairs = 5

// PairedBeats says whether b is faster than a in pairs measured one right
// after the other (each pair: a's time, b's time): in every pair but at
// most one by more than twice MinNoise, over at least MinPairs pairs. The
// gain is the median of a's time over b's, minus 1.
func PairedBeats(pairs [][2]float64) (bool, float64) {
	if len(pairs) == 0 {
		return false, 0
	}
	ratios := make([]float64, 0, len(pairs))
	for _, p := range pairs {
		if p[1] <= 0 {
			return false, 0
		}
		ratios = append(ratios, p[0]/p[1])
	}
	slices.Sort(ratios)
	n := len(ratios)
	gain := (ratios[(n-1)/2]+ratios[n/2])/2 - 1
	if n < MinPairs {
		return false, gain
	}
	return ratios[1] > 1+2*MinNoise, gain
}

// Search measures at every size NCCL's own choice and every candidate,
// coarse first (one repeat each, sizes in order), then, while the budget
// lasts, measures again (Repeats) the leaders within the noise of the best
// and NCCL's own, so a claimed gain rests on repeats. It returns what it
// measured when the budget or ctx ends, with Complete false where a size
// was cut short; OnResult receives each size's result as soon as it is
// known, once measured coarsely and again once refined (rows on disk as
// they are measured).
func Search(ctx context.Context, m Measure, sizes []int64, cands []Choice, budget time.Duration, repeats int, onResult func(Result)) ([]Result, error) {
	return SearchExpanding(ctx, m, sizes, cands, nil, budget, repeats, onResult)
}

// Expand gives more candidates at one size once its first candidates are
// measured: the leader's algorithm and protocol on a coarse grid of
// channel counts, say. Each is measured once, in the same coarse pass.
type Expand func(r Result) []Choice

// SearchExpanding is Search with expand (nil: none) adding candidates at
// each size after its first ones.
func SearchExpanding(ctx context.Context, m Measure, sizes []int64, cands []Choice, expand Expand, budget time.Duration, repeats int, onResult func(Result)) ([]Result, error) {
	if budget <= 0 {
		return nil, fmt.Errorf("a budget of %v: give the search some time, e.g. 2m", budget)
	}
	repeats = max(repeats, 3)
	deadline := time.Now().Add(budget)
	left := func() bool { return ctx.Err() == nil && time.Now().Before(deadline) }
	var out []Result
	for _, size := range sizes {
		r := Result{Size: size, Complete: true}
		// coarse measures cs once each; false for an error that ends the
		// search.
		coarse := func(cs []Choice) error {
			for _, c := range cs {
				if !left() {
					r.Complete = false
					return nil
				}
				ts, err := m(ctx, c, size, 1)
				if errors.Is(err, ErrRefused) || errors.Is(err, ErrIsDefault) {
					continue
				}
				if err != nil {
					if ctx.Err() != nil {
						r.Complete = false
						return nil
					}
					return err
				}
				r.Cells = append(r.Cells, Cell{Choice: c, TimesUS: ts})
			}
			return nil
		}
		if err := coarse(append([]Choice{{Default: true}}, cands...)); err != nil {
			return out, err
		}
		if expand != nil && len(r.Cells) > 0 && r.Complete {
			finish(&r)
			var more []Choice
			for _, c := range expand(r) {
				if !slices.ContainsFunc(r.Cells, func(x Cell) bool { return x.Choice == c }) && !slices.Contains(more, c) {
					more = append(more, c)
				}
			}
			if err := coarse(more); err != nil {
				return out, err
			}
		}
		if len(r.Cells) > 0 {
			finish(&r)
		}
		if onResult != nil {
			onResult(r)
		}
		out = append(out, r)
	}
	// Refine: the leaders of each size (within the sum of the noise floor
	// of the best) and NCCL's own, measured again.
	for i := range out {
		r := &out[i]
		if len(r.Cells) == 0 || !left() {
			continue
		}
		best := bestOf(r.Cells)
		for k := range r.Cells {
			c := &r.Cells[k]
			near := c.Time() <= best.Time()*(1+2*MinNoise+best.Noise())
			if (!near && !c.Choice.Default) || !left() {
				continue
			}
			// One repeat at a time, so the budget binds within a cell
			// (a repeat of a large size takes seconds).
			for k := 0; k < repeats && left(); k++ {
				ts, err := m(ctx, c.Choice, r.Size, 1)
				if errors.Is(err, ErrRefused) {
					break
				}
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					return out, err
				}
				c.TimesUS = append(c.TimesUS, ts...)
				r.Refined = true
			}
		}
		finish(r)
		if onResult != nil {
			onResult(*r)
		}
	}
	// Confirm: every claimed gain measured again in pairs, the default
	// and the best one right after the other.
	for i := range out {
		r := &out[i]
		if r.Gain <= 0 || !left() {
			continue
		}
		for k := 0; k < max(repeats, MinPairs) && left(); k++ {
			// Each pair in turn starts with the other choice, so an order
			// effect cannot pass for a gain.
			order := []Choice{r.Default.Choice, r.Best.Choice}
			if k%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			var got []float64
			for _, c := range order {
				ts, err := m(ctx, c, r.Size, 1)
				if err != nil && !errors.Is(err, ErrRefused) && ctx.Err() == nil {
					return out, err
				}
				if err != nil || len(ts) == 0 {
					break
				}
				got = append(got, ts[0])
			}
			if len(got) == 2 {
				if k%2 == 1 {
					got[0], got[1] = got[1], got[0]
				}
				r.Pairs = append(r.Pairs, [2]float64{got[0], got[1]})
			}
		}
		finish(r)
		if onResult != nil {
			onResult(*r)
		}
	}
	return out, ctx.Err()
}

// bestOf is the fastest cell by median time.
func bestOf(cs []Cell) Cell {
	best := cs[0]
	for _, c := range cs[1:] {
		if c.Time() < best.Time() {
			best = c
		}
	}
	return best
}

// finish sets a result's NCCL choice, best and gain beyond the noise.
func finish(r *Result) {
	r.Gain = 0
	for _, c := range r.Cells {
		if c.Choice.Default {
			r.Default = c
		}
	}
	r.Best = bestOf(r.Cells)
	if r.Best.Choice.Default || len(r.Default.TimesUS) == 0 {
		return
	}
	if len(r.Pairs) > 0 {
		// The pairs have the last word.
		if ok, g := PairedBeats(r.Pairs); ok {
			r.Gain, r.Confirmed = g, true
		}
		return
	}
	if ok, g := Beats(r.Best, r.Default); ok {
		r.Gain = g
	}
}

// NewPairedResult is the result of a default and one other cell measured
// alternately at one size (tune --check): their times in order make the
// pairs, and the other's gain stands only where the pairs confirm it.
func NewPairedResult(size int64, def, other Cell) Result {
	r := Result{Size: size, Cells: []Cell{def, other}, Complete: true}
	for i := range min(len(def.TimesUS), len(other.TimesUS)) {
		r.Pairs = append(r.Pairs, [2]float64{def.TimesUS[i], other.TimesUS[i]})
	}
	finish(&r)
	// The other choice's gain is what its pairs confirm, or none.
	r.Gain, r.Confirmed = 0, false
	if ok, g := PairedBeats(r.Pairs); ok {
		r.Gain, r.Confirmed = g, true
	}
	return r
}

// Slower says whether, in r's pairs, the default beat the other choice
// (the pairs confirm it), and by how much.
func (r Result) Slower() (bool, float64) {
	flipped := make([][2]float64, len(r.Pairs))
	for i, p := range r.Pairs {
		flipped[i] = [2]float64{p[1], p[0]}
	}
	return PairedBeats(flipped)
}

// NewResult is the result of cells measured at one size (one of them the
// default): its best, and the gain over the default beyond the noise.
func NewResult(size int64, cells []Cell) Result {
	r := Result{Size: size, Cells: cells, Complete: true}
	finish(&r)
	return r
}
