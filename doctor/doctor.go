// Package doctor finds the bad GPU, link, NIC or host of a machine or a
// cluster and names it. It runs stages on one world of ranks, splitting it
// per round into groups (the rank-list machinery), with no relaunch:
// health facts without traffic, each GPU alone, every GPU pair of a host,
// host pairs across hosts, the whole world, and data checks everywhere.
// The plans are pure functions; the judge compares each figure with its
// peers of the same link class and with what the topology promises.
//
// Its files stand on floors, and a file uses only what its own floor and
// those below declare (floors_test.go checks it):
//
//  5. rendering: the text report (report.go, rollup.go), HTML (html.go),
//     Prometheus (prom.go), a node's history (history.go, historyhtml.go)
//  4. the stages of the search, methods of one search over the world:
//     doctor.go (Run, measuring a layout), alone.go, pairs.go, paths.go,
//     acrosshosts.go, confirm.go, acrossleaves.go, wholeworld.go,
//     shared.go, counterstage.go, explain.go, which turns what the
//     stages found into findings, simulate.go (a run on a cluster
//     model: the sim backend), and kit.go (what more than one stage
//     reads). A stage's file names no other stage's identifiers (the
//     across-hosts stage is acrosshosts.go, confirm.go and
//     acrossleaves.go); explain.go reads them all
//  3. the rules: judge.go (slow against peers and peak), expect.go (what a
//     GPU model should do), countjudge.go (how far counters may grow),
//     health.go (a registry of rules over the health facts), plan.go (the
//     rounds)
//  2. the record: record.go (findings, figures, the report and its schema)
//  1. the facts: facts.go (NVML's health of each GPU, a host's facts),
//     counters.go, sample.go (the sampler beside each stage), knobs.go
//  0. words.go: medians, sizes and plurals every floor uses
package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// Options configure a doctor run.
type Options struct {
	// Knobs are the mode, sizes and iterations, every one set
	// (DefaultKnobs).
	Knobs
	Thresholds Thresholds
	// Expectations replace, by GPU model, the healthy shares GPUs alone
	// are held to.
	Expectations Expectations
	// Backend names the backend, for the report.
	Backend string
	// Hosts is each world rank's host; Devices each world rank's device.
	Hosts   []string
	Devices []results.Device
	// Facts are every host's health facts (rank 0; empty without NVML).
	Facts []HostFacts
	// Machines is the boot id of the machine each host runs on, by host
	// (rank 0; host-memory backends): simulated hosts on one machine
	// (launch --nodes) share it, and its cores.
	Machines map[string]string
	// Who names a world rank with its host and device, e.g.
	// "rank 3 (node-2, GPU 0000:9a:00.0)".
	Who func(rank int) string
	// Transport says which transport NCCL used between two world ranks, if
	// known; called on rank 0 once the stages ran.
	Transport func(a, b int) string
	// BeforeVerdict, if set, is called by every process once the stages
	// ran and before rank 0 judges (to gather what Transport needs).
	BeforeVerdict func() error
	// Board receives every local rank's progress, for the watchdog.
	Board *watchdog.Board
	// Progress is told when each stage starts (rank 0 only); may be nil.
	Progress func(string)
	// Stage, if set, is told on every process when each stage starts, and
	// "" when the stages are over (for a Sampler).
	Stage func(string)
	// Samples, if set, returns on rank 0 what NVML reported of every GPU
	// while the stages ran; called once BeforeVerdict has run.
	Samples func() []StageSample
	// Growth, if set, returns on rank 0 every error counter that grew on
	// any host while each stage ran, and the XID events; called once
	// BeforeVerdict has run.
	Growth func() []CounterGrowth
	// Watched, if set, says on rank 0 which error counters each host's
	// processes could read.
	Watched func() []string
	// Counters are the rules for the counters' growth by hardware class.
	Counters CounterThresholds
	// Clock, if set, is the time in seconds that stages are timed by (a
	// cluster model's time); wall time otherwise.
	Clock func() float64
	// Fabric, if set, is the switch network between the hosts.
	Fabric *Fabric
}

// Fabric is the switch network between hosts, where a cluster file gives
// it: the leaf switch of every host, and the spine that carries each rail
// (local GPU index) between leaves. With it, the stage across hosts also
// pairs hosts of different leaves, and names a slow uplink between a leaf
// and a spine rather than the hosts behind it.
type Fabric struct {
	Leaf  map[string]string `json:"leaf"`  // host -> leaf switch
	Spine []string          `json:"spine"` // rail -> spine switch
}

// search is one run of the doctor on a world.
type search struct {
	ctx   context.Context
	w     measure.World
	o     Options
	n     int
	ctl   measure.Control
	rank0 bool
	rep   *Report

	hostList []string
	members  map[string][]int
	devIndex map[int]int // world rank -> GPU index on its host (from the facts)
	facts    map[string]*HostFacts

	// The stage running, for progress: its name, start, rounds done and
	// the rounds its first pass plans (0: not known).
	stageName        string
	stageT0          time.Time
	roundsDone, plan int

	wrong []wrongObs
	// paths are the network paths between hosts that NCCL's proxy showed
	// inside doctor's collectives, by stage (rank 0's, from the plugin).
	paths map[pathKey]*pathSum
	// moved is doctor's own tally of the bytes each world rank sent and
	// received, by stage, for the error counters' rates.
	moved map[string]map[int]*traffic
	// Agreed outcomes of the stages (every process knows them).
	slowRanks map[int]suspect
	// crossSeen is every pair across hosts as first measured (the figures
	// on rank 0), from which pairs measured again take their controls.
	crossSeen []crossFig
	// crossScale is the least median, over the rounds of pairs measured
	// again, of their controls' figures over their first ones (1 when
	// none fell).
	crossScale float64
	// ctlRounds counts the rounds of pairs measured again that had
	// minControls controls or more, and lowRounds those whose controls'
	// median fell below their first figures by more than the drop.
	ctlRounds, lowRounds int
	// crossAgain is, on rank 0, every measurement again of a pair across
	// hosts, for its finding's evidence.
	crossAgain map[crossID][]againFig
	// ctlN and ctlSlow count, on rank 0, the controls measured beside pairs
	// measured again, and those that were slow.
	ctlN, ctlSlow int
	slowPairs     map[string]suspect // by "a-b", a < b
	found         []Finding
	// iters is the timed iterations of each measurement: Options.Iters,
	// cut (for the rest of the run) when one operation is so slow that a
	// measurement would pass MeasureBudget (bound).
	iters   int
	cutNote int // 1 + the index of the note that says so, once cut
	// pairModel, set by tests, measures a round of pairs within hosts on
	// a model of the machine instead of the world.
	pairModel func(pairs [][2]int, round int) map[[2]int]PairFigure
}

// wrongObs is a group in which some rank received wrong values.
type wrongObs struct {
	Stage string             `json:"stage"`
	Coll  string             `json:"coll"`
	Group []int              `json:"group"` // world ranks in group order
	Bad   []results.Mismatch `json:"bad"`   // Rank is the world rank
	Count int64              `json:"count"`
}

// A stage is one step of the search over the world, after the health
// facts: its name as the report gives it, why it has nothing to measure
// here ("" when it has), and its run, which records what it measured on
// the search for explain.go to judge.
type stage interface {
	Name(d *search) string
	Skip(d *search) string
	Run(d *search) error
}

// stages is the search's registry of stages, in the order they run; each
// stage's type is in its own file.
var stages = []stage{aloneStage{}, pairStage{}, acrossHostsStage{}, worldStage{}}

// Run runs every stage on w and returns the report (complete on world
// rank 0). Every process of a distributed world calls it with the same
// options; rank 0 judges and the others follow its decisions.
func Run(ctx context.Context, w measure.World, o Options) (*Report, error) {
	now := o.Clock
	if now == nil {
		t0 := time.Now()
		now = func() float64 { return time.Since(t0).Seconds() }
	}
	start := now()
	d := &search{ctx: ctx, w: w, o: o, n: w.Size(), rank0: true, slowRanks: map[int]suspect{}, slowPairs: map[string]suspect{}, crossScale: 1, crossAgain: map[crossID][]againFig{},
		members: map[string][]int{}, devIndex: map[int]int{}, facts: map[string]*HostFacts{}, iters: o.Iters}
	if dist, ok := w.(measure.Distributed); ok && dist.Control() != nil {
		d.ctl = dist.Control()
		d.rank0 = d.ctl.Rank() == 0
	}
	if d.o.Who == nil {
		d.o.Who = func(r int) string { return fmt.Sprintf("rank %d (%s)", r, d.host(r)) }
	}
	mode := "full"
	if o.Quick {
		mode = "quick"
	}
	d.rep = &Report{Schema: Schema, Mode: mode, Backend: o.Backend, Ranks: d.n, Facts: o.Facts, Plan: []PlanStep{}, Completed: []string{}}
	for r := 0; r < d.n; r++ {
		h := d.host(r)
		if _, ok := d.members[h]; !ok {
			d.hostList = append(d.hostList, h)
		}
		d.members[h] = append(d.members[h], r)
	}
	d.rep.Hosts = d.hostList
	if len(o.Machines) > 0 {
		ids := map[string]bool{}
		for _, h := range d.hostList {
			ids[machineID(o.Machines, h)] = true
		}
		d.rep.Machines = len(ids)
	}
	for i := range o.Facts {
		f := &o.Facts[i]
		d.facts[f.Host] = f
	}
	for r := 0; r < d.n && r < len(o.Devices); r++ {
		if f := d.facts[d.host(r)]; f != nil {
			for _, g := range f.GPUs {
				if g.BusID != "" && strings.EqualFold(g.BusID, o.Devices[r].BusID) {
					d.devIndex[r] = g.Index
				}
			}
		}
	}
	d.rep.Plan = append(d.rep.Plan, PlanStep{Stage: "health", Layout: "-", What: fmt.Sprintf("NVML and sysfs facts of %d host(s), no traffic", len(o.Facts))})
	// A run that stops on a fault still gives rank 0 a verdict: what the
	// finished stages found, and the stage it stopped in.
	stopped := func(stage string, err error) (*Report, error) {
		d.rep.StoppedIn = stage
		if d.rank0 {
			d.assemble()
		}
		d.rep.Healthy = false
		d.rep.Seconds = now() - start
		return d.rep, err
	}
	for _, st := range stages {
		name := st.Name(d)
		if err := ctx.Err(); err != nil {
			return stopped(name, err)
		}
		// A stage that has nothing to measure here is not announced as
		// running: the report says why it was skipped.
		if skip := st.Skip(d); skip != "" {
			d.rep.Stages = append(d.rep.Stages, StageTime{Stage: name, Skipped: skip})
			d.rep.Plan = append(d.rep.Plan, PlanStep{Stage: name, Layout: "-", What: "skipped: " + skip})
			continue
		}
		if d.rank0 && o.Progress != nil {
			o.Progress(name)
		}
		if o.Stage != nil {
			o.Stage(name)
		}
		t0 := now()
		d.stageName, d.stageT0, d.roundsDone, d.plan = name, time.Now(), 0, 0
		err := st.Run(d)
		if o.Stage != nil {
			o.Stage("")
		}
		d.rep.Stages = append(d.rep.Stages, StageTime{Stage: name, Seconds: now() - t0, Rounds: d.roundsDone})
		if err != nil {
			return stopped(name, fmt.Errorf("%s: %w", name, err))
		}
		d.rep.Completed = append(d.rep.Completed, name)
	}
	if o.BeforeVerdict != nil {
		if err := o.BeforeVerdict(); err != nil {
			return stopped("the verdict", err)
		}
	}
	if d.rank0 {
		if o.Samples != nil {
			d.rep.Samples = o.Samples()
		}
		if o.Growth != nil {
			d.rep.Counters = o.Growth()
		}
		if o.Watched != nil {
			d.rep.Watched = o.Watched()
		}
		d.assemble()
	}
	d.rep.Seconds = now() - start
	d.rep.Modelled = o.Clock != nil
	return d.rep, nil
}

func (d *search) host(r int) string {
	if r >= 0 && r < len(d.o.Hosts) {
		return d.o.Hosts[r]
	}
	return "localhost"
}

// agree makes every process hold rank 0's value of v.
func (d *search) agree(v any) error { return measure.Agree(d.ctl, v) }

// layout completes groups with a group of one for every other rank.
func (d *search) layout(groups [][]int) measure.Layout {
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
func (d *search) split(l measure.Layout) (measure.World, func(), error) {
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
func (d *search) measureSplit(l measure.Layout, c measure.Collective, sizes []int64, stage string) ([][]*results.Half, error) {
	gw, done, err := d.split(l)
	if err != nil {
		return nil, err
	}
	defer done()
	return d.measure(l, gw, c, sizes, stage)
}

// measure runs c (root 0) on every group of l at sizes and returns each
// size's half per group (complete on rank 0), noting wrong values.
func (d *search) measure(l measure.Layout, gw measure.World, c measure.Collective, sizes []int64, stage string) ([][]*results.Half, error) {
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
			d.wrong = append(d.wrong, obs)
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
func (d *search) bound(out [][]*results.Half, stage string) error {
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

// traffic is what one rank sent and received in one stage: over links
// within its host, across hosts, and within its own memory (a group of one).
type traffic struct {
	Link, Net, Local float64
}

// tally adds to each rank's traffic in the running stage what measuring c
// at sizes on every group of l sends and receives: for each execution
// (warm-up, timed and checked), the bus bytes (NCCL's busbw convention:
// the bytes each rank puts on its link) each way it carries them, and for
// a group of one, the copy's read and write.
func (d *search) tally(l measure.Layout, c measure.Collective, sizes []int64) {
	if d.moved == nil {
		d.moved = map[string]map[int]*traffic{}
	}
	m := d.moved[d.stageName]
	if m == nil {
		m = map[int]*traffic{}
		d.moved[d.stageName] = m
	}
	execs := float64(d.iters + d.o.Warmup + 1)
	// Each rank both sends and receives, except in a rooted one-way
	// collective, where each byte is either sent or received.
	dirs := 2.0
	if c == measure.Broadcast || c == measure.Reduce {
		dirs = 1
	}
	for _, g := range l.Groups {
		k := len(g)
		cross := false
		for _, r := range g {
			cross = cross || d.host(r) != d.host(g[0])
		}
		for _, sz := range sizes {
			bytes := float64(measure.GeometryFor(c, sz, 4, k, 0).Bytes)
			for _, r := range g {
				t := m[r]
				if t == nil {
					t = &traffic{}
					m[r] = t
				}
				switch {
				case k == 1:
					t.Local += 2 * bytes * execs
				case cross:
					t.Net += dirs * bytes * c.BusFactor(k) * execs
				default:
					t.Link += dirs * bytes * c.BusFactor(k) * execs
				}
			}
		}
	}
}

func (d *search) step(stage string, round int, l measure.Layout, what string) {
	d.rep.Plan = append(d.rep.Plan, PlanStep{Stage: stage, Round: round, Layout: l.Spec, What: what})
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

// deviceName is a world rank's device model (without the host that the
// cpu backend's device names carry), so like devices are peers.
func (d *search) deviceName(r int) string {
	if r < len(d.o.Devices) && d.o.Devices[r].Name != "" {
		return strings.TrimSuffix(d.o.Devices[r].Name, " on "+d.host(r))
	}
	return "device"
}
