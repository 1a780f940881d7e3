package measure

import (
	"fmt"
	"slices"
	"strings"

	"collbench/dtype"
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
	// NoRecord runs no operation with the library's recorder on (see
	// Recorder): for checks that want no timing, such as verify-groups.
	NoRecord bool
	// IterStats adds per-iteration timing (another Iters operations, each
	// timed on its own) and its statistics to every half.
	IterStats bool
	// GraphReplays, when above 0, captures Iters operations into a CUDA
	// graph once and replays it this many times for the timing.
	GraphReplays int
	// Agg issues this many operations per timed iteration as one group
	// (NCCL's benchmark -m); the time is per operation.
	Agg int
	// Blocking synchronises after every iteration (-z): 1 and a barrier,
	// 2 without one, 3 with a barrier left out of the time.
	Blocking int
	// Misalign offsets both buffers by this many elements (-u).
	Misalign int
	// Cycles repeats the whole sweep (-N); each row reports the median of
	// its cycles, with their range.
	Cycles int
	// Stable repeats the whole sweep until it is stable (--stable): at
	// least StableMinCycles cycles, then until no row's median time moved
	// more than StableTolerance in the last cycle, at most Cycles.
	Stable bool
	// Register registers the buffers with the communicators (-R): 1
	// locally, 2 as symmetric windows.
	Register int
	// CPUTime also reports the host time of issuing each operation (-C).
	CPUTime bool
	// Bitwise, when above 0, runs each half's call this many times more,
	// after its checks, on the same random inputs, and compares the
	// outputs' bits (--bitwise; BitwiseApplies says which cases).
	Bitwise int
}

// MaxMisalign is the largest --misalign: enough to step over any alignment
// a library rounds to, small enough that the padding stays negligible.
const MaxMisalign = 4096

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
	case p.Agg < 0:
		return fmt.Errorf("invalid --agg %d: must be 1 or more", p.Agg)
	case p.Blocking < 0 || p.Blocking > 3:
		return fmt.Errorf("invalid --blocking %d: 0 (off), 1 (sync and barrier), 2 (sync), 3 (sync and barrier, barrier not timed)", p.Blocking)
	case p.Misalign < 0 || p.Misalign > MaxMisalign:
		return fmt.Errorf("invalid --misalign %d: must be 0 to %d elements (an offset of 1 already breaks the alignment)", p.Misalign, MaxMisalign)
	case p.Cycles < 0:
		return fmt.Errorf("invalid --cycles %d: must be 1 or more", p.Cycles)
	case p.Stable && p.Cycles > 1 && p.Cycles < StableMinCycles:
		return fmt.Errorf("--stable with --cycles %d: the bound must be at least %d cycles (or leave --cycles out: %d)", p.Cycles, StableMinCycles, StableMaxCycles)
	case p.Register < 0 || p.Register > 2:
		return fmt.Errorf("invalid --register %d: 0 (off), 1 (local), 2 (symmetric)", p.Register)
	case p.GraphReplays > 0 && (p.Agg > 1 || p.Blocking > 0):
		return fmt.Errorf("--cuda-graph replays the plain timed loop: leave out --agg and --blocking")
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

// CycleBound is the most cycles the plan runs: Cycles, or with Stable and
// no Cycles of its own, StableMaxCycles.
func (p Plan) CycleBound() int {
	if p.Stable && p.Cycles <= 1 {
		return StableMaxCycles
	}
	return max(p.Cycles, 1)
}
