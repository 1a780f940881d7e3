package measure

import (
	"fmt"
	"strconv"
	"strings"

	"collbench/dtype"
)

// DefaultSizes is the sweep a run measures when it names no sizes.
const DefaultSizes = "8:32M"

// Spec is a plan in the user's words, as the flags and a suite's YAML give
// it; Plan resolves it, the one place that does. Its fields are the flags'
// (--sizes, or -b/-e/-f/-i; --dtype, --op, --root, --mode...).
type Spec struct {
	Collectives []Collective

	Sizes      string
	MinBytes   string
	MaxBytes   string
	StepFactor int64
	StepBytes  string

	DType   string
	Op      string
	Root    string
	Iters   int
	Warmup  int
	Check   int
	Mode    string
	Average string
	Seed    uint64

	IterStats bool
	CUDAGraph int

	// NCCL benchmark features.
	Agg      int
	Blocking int
	Misalign int
	CPUTime  bool
	Cycles   int
	Stable   bool
	Register string
	// Bitwise is --bitwise N (0: off).
	Bitwise int
}

// sizes resolves --sizes or the -b/-e/-f/-i flags.
func (o Spec) sizes() ([]int64, error) {
	bounds := o.MinBytes != "" || o.MaxBytes != "" || o.StepBytes != ""
	if bounds && o.Sizes != "" {
		return nil, fmt.Errorf("use either --sizes or -b/-e/-f/-i, not both")
	}
	if bounds {
		if o.MinBytes == "" {
			return nil, fmt.Errorf("-e/-i need -b (the smallest size)")
		}
		return SizesFromBounds(o.MinBytes, o.MaxBytes, o.StepFactor, o.StepBytes)
	}
	spec := o.Sizes
	if spec == "" {
		spec = DefaultSizes
	}
	return ParseSizes(spec)
}

// parseList parses a comma list of values or "all". A value listed twice
// under any spelling (float,fp32) is kept once, in its first place, as
// overlapping size ranges are, so no row is measured twice.
func parseList[T comparable](s string, all []T, parse func(string) (T, error)) ([]T, bool, error) {
	var out []T
	seen := map[T]bool{}
	add := func(v T) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	isAll := false
	for _, part := range strings.Split(s, ",") {
		if strings.EqualFold(strings.TrimSpace(part), "all") {
			for _, v := range all {
				add(v)
			}
			isAll = true
			continue
		}
		v, err := parse(part)
		if err != nil {
			return nil, false, err
		}
		add(v)
	}
	return out, isAll, nil
}

// Plan resolves the spec into a plan, or says which word is wrong.
func (o Spec) Plan() (Plan, error) {
	var p Plan
	var err error
	p.Collectives = o.Collectives
	if p.Sizes, err = o.sizes(); err != nil {
		return p, err
	}
	var allT, allO bool
	if p.DTypes, allT, err = parseList(o.DType, dtype.All(), dtype.Parse); err != nil {
		return p, err
	}
	if p.Ops, allO, err = parseList(o.Op, AllOps(), ParseOp); err != nil {
		return p, err
	}
	p.SkipUnsupported = allT || allO
	if r := strings.TrimSpace(o.Root); !strings.EqualFold(r, "all") {
		v, err := strconv.Atoi(r)
		if err != nil {
			return p, fmt.Errorf("invalid --root %q (use a rank number or all)", o.Root)
		}
		p.Roots = []int{v}
	}
	switch strings.ToLower(o.Mode) {
	case "both":
		p.OutOfPlace, p.InPlace = true, true
	case "out-of-place", "oop", "outofplace":
		p.OutOfPlace = true
	case "in-place", "ip", "inplace":
		p.InPlace = true
	default:
		return p, fmt.Errorf("unknown --mode %q (valid: both, out-of-place, in-place)", o.Mode)
	}
	if p.Average, err = ParseAverage(o.Average); err != nil {
		return p, err
	}
	p.Iters, p.Warmup, p.Check, p.Seed = o.Iters, o.Warmup, o.Check, o.Seed
	p.IterStats, p.GraphReplays = o.IterStats, o.CUDAGraph
	p.Agg, p.Blocking, p.Misalign, p.CPUTime, p.Cycles, p.Stable = o.Agg, o.Blocking, o.Misalign, o.CPUTime, o.Cycles, o.Stable
	if o.Agg < 1 {
		return p, fmt.Errorf("invalid --agg %d: must be 1 or more", o.Agg)
	}
	if o.Cycles < 1 {
		return p, fmt.Errorf("invalid --cycles %d: must be 1 or more", o.Cycles)
	}
	if p.Bitwise = o.Bitwise; o.Bitwise < 0 {
		return p, fmt.Errorf("invalid --bitwise %d: must be 1 or more (runs of each row to compare bit for bit)", o.Bitwise)
	}
	if o.Bitwise > 0 && !p.bitwiseApplies() {
		return p, fmt.Errorf("--bitwise compares the bits of reductions of floating-point types, and this plan has none (%s): integer sums are exact in any order, and data that is only moved keeps its bits",
			p.caseWords())
	}
	switch strings.ToLower(strings.TrimSpace(o.Register)) {
	case "none", "0", "":
	case "local", "1":
		p.Register = 1
	case "symmetric", "2":
		p.Register = 2
	default:
		return p, fmt.Errorf("unknown --register %q (valid: none, local, symmetric, or 0, 1, 2)", o.Register)
	}
	return p, nil
}

// bitwiseApplies says whether any case of the plan is one --bitwise
// compares.
func (p Plan) bitwiseApplies() bool {
	for _, c := range p.Collectives {
		for _, t := range p.DTypes {
			if BitwiseApplies(c, t) {
				return true
			}
		}
	}
	return false
}

// caseWords names the plan's collectives and types.
func (p Plan) caseWords() string {
	var cs, ts []string
	for _, c := range p.Collectives {
		cs = append(cs, c.String())
	}
	for _, t := range p.DTypes {
		ts = append(ts, t.String())
	}
	return strings.Join(cs, ", ") + " of " + strings.Join(ts, ", ")
}

// ParseDTypes parses a comma list of element types, each named as --dtype
// names it.
func ParseDTypes(s string) ([]dtype.DType, error) {
	var out []dtype.DType
	for _, part := range strings.Split(s, ",") {
		t, err := dtype.Parse(part)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DTypeNames are the element types' names, for help texts.
func DTypeNames() []string { return dtype.Names() }
