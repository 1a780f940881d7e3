// Package doctor finds the bad GPU, link, NIC or host of a machine or a
// cluster and names it. It runs stages on one world of ranks, splitting it
// per round into groups (the rank-list machinery), with no relaunch:
// health facts without traffic, each GPU alone, every GPU pair of a host,
// host pairs across hosts, the whole world, and data checks everywhere.
// The plans are pure functions; the judge compares each figure with its
// peers of the same link class and with what the topology promises.
//
// It stands on floors, lowest first; each imports or uses only what the
// floors below it declare. The lower four are packages of their own under
// internal/, which the import test holds (cmd/collbench/arch_test.go,
// doctorFloors); the doctor's own files make the top two, which
// floors_test.go checks file by file:
//
//  0. internal/facts: the words every floor uses (words.go), NVML's health
//     of each GPU and a host's facts (facts.go), counters.go, the sampler
//     beside each stage (sample.go), a run's knobs (knobs.go)
//  1. internal/record: findings, figures, the report, its schema and JSON
//  2. internal/rules: slow against peers and peak (judge.go), what a GPU
//     model should do (expect.go), how far counters may grow
//     (countjudge.go), a registry of rules over the health facts
//     (health.go), the rounds (plan.go)
//  3. internal/render: the text report (report.go, rollup.go), HTML
//     (html.go), Prometheus (prom.go), a node's history (history.go,
//     historyhtml.go)
//  4. the evidence and the verdict: api.go (what the rest of collbench
//     uses of the floors below), site.go (the options, where each rank
//     runs, the stages' outcomes), observe.go (what measuring observed),
//     explain.go (the verdict: a pure function of the evidence, a list of
//     rules in order), with its rules over NCCL's paths (paths.go), shared
//     GPUs (shared.go) and error counters (counterstage.go); nothing here
//     measures
//  5. the meter and the stages: doctor.go (Run, the meter a stage
//     measures with, which keeps few methods), notes.go (what the meter
//     notes for the verdict), kit.go (what more than one stage reads), and
//     one unit per stage, each a type that holds its own state and returns
//     its own outcome: alone.go, pairs.go, acrosshosts.go with confirm.go
//     and acrossleaves.go, wholeworld.go; simulate.go (a run on a cluster
//     model: the sim backend). A stage's file names no other stage's
//     identifiers
package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"collbench/doctor/internal/record"
	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
)

// meter is what a stage measures with, and all it may touch of the run:
// the world and its site, the collectives measured on groups of it, rank
// 0's decisions that every process agrees on, and the record the
// measurements go to (the plan, the figures, the notes). What measuring
// observes on the way (wrong values, NCCL's paths between hosts, each
// rank's traffic) is kept for the verdict. It keeps its methods few
// (TestMeterStaysNarrow).
type meter struct {
	*site
	ctx   context.Context
	w     measure.World
	ctl   measure.Control
	rank0 bool
	rep   *record.Report

	// The stage running, for progress: its name, start, rounds done and
	// the rounds its first pass plans (0: not known).
	stageName        string
	stageT0          time.Time
	roundsDone, plan int

	// iters is the timed iterations of each measurement: Options.Iters,
	// cut (for the rest of the run) when one operation is so slow that a
	// measurement would pass MeasureBudget (bound).
	iters   int
	cutNote int // 1 + the index of the note that says so, once cut

	seen observed
}

// A stage is one step of the search over the world, after the health
// facts: its name as the report gives it, why it has nothing to measure
// here ("" when it has), and its run, which measures with the meter, reads
// the outcomes of the stages before it and returns its own. A stage's
// figures go to the record; what they mean is the verdict's (explain.go).
type stage interface {
	Name(s *site) string
	Skip(s *site) string
	Run(m *meter, before outcome) (outcome, error)
}

// stages is the search's registry of stages, in the order they run; each
// stage's type is in its own file.
var stages = []stage{aloneStage{}, pairStage{}, acrossHostsStage{}, worldStage{}}

// Run runs every stage on w and returns the report (complete on world
// rank 0). Every process of a distributed world calls it with the same
// options; rank 0 judges and the others follow its decisions.
func Run(ctx context.Context, w measure.World, o Options) (*record.Report, error) {
	now := o.Clock
	if now == nil {
		t0 := time.Now()
		now = func() float64 { return time.Since(t0).Seconds() }
	}
	start := now()
	s := newSite(o, w.Size())
	m := &meter{site: s, ctx: ctx, w: w, rank0: true, iters: o.Iters}
	if dist, ok := w.(measure.Distributed); ok && dist.Control() != nil {
		m.ctl = dist.Control()
		m.rank0 = m.ctl.Rank() == 0
	}
	mode := "full"
	if o.Quick {
		mode = "quick"
	}
	m.rep = &record.Report{Schema: record.Schema, Mode: mode, Backend: o.Backend, Ranks: s.n, Facts: o.Facts, Plan: []record.PlanStep{}, Completed: []string{}, Hosts: s.hostList}
	if len(o.Machines) > 0 {
		ids := map[string]bool{}
		for _, h := range s.hostList {
			ids[machineID(o.Machines, h)] = true
		}
		m.rep.Machines = len(ids)
	}
	m.rep.Plan = append(m.rep.Plan, record.PlanStep{Stage: "health", Layout: "-", What: fmt.Sprintf("NVML and sysfs facts of %d host(s), no traffic", len(o.Facts))})
	var got outcome
	got.add(outcome{})
	// A run that stops on a fault still gives rank 0 a verdict: what the
	// finished stages found, and the stage it stopped in.
	stopped := func(stage string, err error) (*record.Report, error) {
		m.rep.StoppedIn = stage
		if m.rank0 {
			applyVerdict(m.rep, reachVerdict(evidenceOf(m, got)))
		}
		m.rep.Healthy = false
		m.rep.Seconds = now() - start
		return m.rep, err
	}
	for _, st := range stages {
		name := st.Name(s)
		if err := ctx.Err(); err != nil {
			return stopped(name, err)
		}
		// A stage that has nothing to measure here is not announced as
		// running: the report says why it was skipped.
		if skip := st.Skip(s); skip != "" {
			m.rep.Stages = append(m.rep.Stages, record.StageTime{Stage: name, Skipped: skip})
			m.rep.Plan = append(m.rep.Plan, record.PlanStep{Stage: name, Layout: "-", What: "skipped: " + skip})
			continue
		}
		if m.rank0 && o.Progress != nil {
			o.Progress(name)
		}
		if o.Stage != nil {
			o.Stage(name)
		}
		t0 := now()
		m.stageName, m.stageT0, m.roundsDone, m.plan = name, time.Now(), 0, 0
		mine, err := st.Run(m, got)
		got.add(mine)
		if o.Stage != nil {
			o.Stage("")
		}
		m.rep.Stages = append(m.rep.Stages, record.StageTime{Stage: name, Seconds: now() - t0, Rounds: m.roundsDone})
		if err != nil {
			return stopped(name, fmt.Errorf("%s: %w", name, err))
		}
		m.rep.Completed = append(m.rep.Completed, name)
	}
	if o.BeforeVerdict != nil {
		if err := o.BeforeVerdict(); err != nil {
			return stopped("the verdict", err)
		}
	}
	if m.rank0 {
		if o.Samples != nil {
			m.rep.Samples = o.Samples()
		}
		if o.Growth != nil {
			m.rep.Counters = o.Growth()
		}
		if o.Watched != nil {
			m.rep.Watched = o.Watched()
		}
		applyVerdict(m.rep, reachVerdict(evidenceOf(m, got)))
	}
	m.rep.Seconds = now() - start
	m.rep.Modelled = o.Clock != nil
	return m.rep, nil
}

// agree makes every process hold rank 0's value of v.
func (d *meter) agree(v any) error { return measure.Agree(d.ctl, v) }

// layout completes groups with a group of one for every other rank.
func (d *meter) layout(groups [][]int) measure.Layout {
	in := map[int]bool{}
	var gs [][]int
	for _, g := range groups {
		gs = append(gs, append([]int(nil), g...))
		for _, r := range g {
			in[r] = true
		}
	}
	for r := 0; r < d.n; r++ {
		if !in[r] {
			gs = append(gs, []int{r})
		}
	}
	var parts []string
	for _, g := range gs {
		if len(g) > 1 {
			s := make([]string, len(g))
			for i, r := range g {
				s[i] = fmt.Sprint(r)
			}
			parts = append(parts, "["+strings.Join(s, ",")+"]")
		}
	}
	spec := "[" + strings.Join(parts, ",") + "]"
	if len(parts) == 0 {
		spec = "singletons"
	}
	return measure.Layout{Spec: spec, Groups: gs}
}

// split returns w split by l (w itself for one group) and its closer.
func (d *meter) split(l measure.Layout) (measure.World, func(), error) {
	if len(l.Groups) == 1 {
		return d.w, func() {}, nil
	}
	gw, err := d.w.Split(l)
	if err != nil {
		return nil, nil, err
	}
	return gw, func() { gw.Close() }, nil
}

// measureSplit splits the world by l, measures c at sizes in every group
// at once and closes the split again.
func (d *meter) measureSplit(l measure.Layout, c measure.Collective, sizes []int64, stage string) ([][]*results.Half, error) {
	gw, done, err := d.split(l)
	if err != nil {
		return nil, err
	}
	defer done()
	return d.measure(l, gw, c, sizes, stage)
}

// measure runs c (root 0) on every group of l at sizes and returns each
// size's half per group (complete on rank 0), noting wrong values.
func (d *meter) measure(l measure.Layout, gw measure.World, c measure.Collective, sizes []int64, stage string) ([][]*results.Half, error) {
	op := measure.Sum
	root := -1
	if !c.Reduces() {
		op = measure.NoOp
	}
	if c.Rooted() {
		root = 0
	}
	// Each iteration is timed on its own and the best one counts: a faulty
	// part is slow in every iteration, a healthy one that shares its host's
	// cores or links with others is fast in some.
	plan := measure.Plan{Collectives: []measure.Collective{c}, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
		Sizes: sizes, Iters: d.iters, Warmup: d.o.Warmup, Check: 1, OutOfPlace: true, Average: measure.AvgMean, Seed: uint64(len(d.rep.Plan) + 1), //nolint:gosec // G115: a seed from a small count
		IterStats: true}
	rn := &measure.Runner{World: d.w, Layout: l, Plan: plan, Cases: []measure.Case{{Coll: c, DType: dtype.Float32, Op: op, Root: root}},
		Board: d.o.Board, SkipWorldWarmup: true}
	if len(l.Groups) > 1 {
		rn.Grouped = gw
	}
	d.tally(l, c, sizes)
	rows, err := rn.Run(d.ctx)
	if err != nil {
		return nil, err
	}
	out := make([][]*results.Half, len(rows))
	for si, row := range rows {
		if len(row.Groups) == 0 {
			out[si] = []*results.Half{row.OutOfPlace}
		} else {
			for _, g := range row.Groups {
				out[si] = append(out[si], g.OutOfPlace)
			}
		}
		for gi, h := range out[si] {
			if h != nil && h.Iter != nil && h.Iter.MinUS > 0 {
				k := len(l.Groups[gi])
				h.TimeUS = h.Iter.MinUS
				h.AlgBW = float64(measure.GeometryFor(c, sizes[si], 4, k, 0).Bytes) / (h.TimeUS * 1e3)
				h.BusBW = h.AlgBW * c.BusFactor(k)
			}
			if h != nil && d.rank0 {
				d.notePaths(stage, l.Groups[gi], h.Kernels)
			}
			if h == nil || h.Wrong == nil || *h.Wrong == 0 {
				continue
			}
			obs := wrongObs{Stage: stage, Coll: c.String(), Group: l.Groups[gi], Count: *h.Wrong}
			for _, m := range h.Mismatches {
				if m.Rank >= 0 && m.Rank < len(obs.Group) {
					m.Rank = obs.Group[m.Rank]
				}
				obs.Bad = append(obs.Bad, m)
			}
			d.seen.wrong = append(d.seen.wrong, obs)
		}
	}
	return out, d.bound(out, stage)
}

// MeasureBudget bounds the wall time of one measurement (one collective
// at its sizes): when its slowest operation says that the next one at
// the full iteration count would take longer, doctor cuts the timed
// iterations, to no fewer than minIters, for the rest of the run, and
// says so in a note. A healthy part is far from it (a 256 MiB NVLink
// pair operation takes about 1 ms; the budget binds at about 45 ms with
// 20 iterations): it bounds the run where a path is tens of times slower
// than it should be, such as GPU pairs over NCCL's socket transport.
var MeasureBudget = 2 * time.Second

const minIters = 3

// bound cuts d.iters after a measurement whose operations were too slow
// for MeasureBudget (see there); rank 0 decides and every rank follows.
func (d *meter) bound(out [][]*results.Half, stage string) error {
	if d.iters <= minIters {
		return nil
	}
	next := d.iters
	var worst float64 // µs, the slowest operation's mean time
	if d.rank0 {
		for _, hs := range out {
			for _, h := range hs {
				if h == nil {
					continue
				}
				t := h.TimeUS
				if h.Iter != nil && h.Iter.MeanUS > t {
					t = h.Iter.MeanUS
				}
				worst = max(worst, t)
			}
		}
		// Each timed iteration runs twice (the loop and the per-iteration
		// timing), besides the warm-up and the check.
		per := 2*float64(d.iters) + float64(d.o.Warmup) + 1
		if budget := float64(MeasureBudget.Microseconds()); worst*per > budget {
			next = max(minIters, int((budget/worst-float64(d.o.Warmup)-1)/2))
		}
	}
	if err := d.agree(&next); err != nil {
		return err
	}
	if next < d.iters && d.rank0 {
		// One note for the run, the latest cut.
		note := fmt.Sprintf("%s: one operation took %.1f ms, so the measurements from there on run %d timed iterations instead of %d, to stay within %s each (doctor's bound on one measurement)",
			stage, worst/1e3, next, d.o.Iters, MeasureBudget)
		if d.cutNote > 0 {
			d.rep.Notes[d.cutNote-1] = note
		} else {
			d.rep.Notes = append(d.rep.Notes, note)
			d.cutNote = len(d.rep.Notes)
		}
	}
	d.iters = min(d.iters, next)
	return nil
}

func (d *meter) step(stage string, round int, l measure.Layout, what string) {
	d.rep.Plan = append(d.rep.Plan, record.PlanStep{Stage: stage, Round: round, Layout: l.Spec, What: what})
	d.roundsDone++
	if d.rank0 && d.o.Progress != nil && d.plan > 1 {
		d.o.Progress(roundProgress(d.stageName, d.roundsDone, d.plan, time.Since(d.stageT0)))
	}
}

// roundProgress says how far a stage of rounds is: the rounds done of
// those its first pass plans, the time so far, and what is left at the
// pace so far (suspects measured again add rounds past the plan).
func roundProgress(stage string, done, plan int, took time.Duration) string {
	s := fmt.Sprintf("%s: round %d of %d, %.0f s so far", stage, done, plan, took.Seconds())
	if done < plan {
		left := took / time.Duration(done) * time.Duration(plan-done)
		s += fmt.Sprintf(", about %.0f s left", left.Seconds())
	} else if done > plan {
		s = fmt.Sprintf("%s: round %d (%d planned, then suspects measured again), %.0f s so far", stage, done, plan, took.Seconds())
	}
	return s
}

// evidenceOf gathers the verdict's evidence from a run: the stages'
// outcomes and the meter's record.
func evidenceOf(m *meter, got outcome) evidence {
	return evidence{site: m.site, outcome: got, observed: m.seen, pairFigs: m.rep.Pairs, samples: m.rep.Samples, counters: m.rep.Counters}
}
