package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"collbench/dtype"
	"collbench/results"
	"collbench/suites"
	"collbench/watchdog"
)

// Options configure a doctor run.
type Options struct {
	// Quick runs the health facts and one round of each stage: node admission.
	Quick bool
	// BWSize and LatSize are the message sizes of the pair and host tests;
	// CopySize that of each GPU alone and WorldSize of the whole world.
	BWSize, LatSize, CopySize, WorldSize int64
	Iters, Warmup                        int
	Thresholds                           Thresholds
	// Backend names the backend, for the report.
	Backend string
	// Hosts is each world rank's host; Devices each world rank's device.
	Hosts   []string
	Devices []results.Device
	// Facts are every host's health facts (rank 0; empty without NVML).
	Facts []HostFacts
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
}

// doc is one run of the doctor on a world.
type doc struct {
	ctx   context.Context
	w     suites.World
	o     Options
	n     int
	ctl   suites.Control
	rank0 bool
	rep   *Report

	hostList []string
	members  map[string][]int
	devIndex map[int]int // world rank -> GPU index on its host (from the facts)
	facts    map[string]*HostFacts

	wrong []wrongObs
	// Agreed outcomes of the stages (every process knows them).
	slowRanks map[int]suspect
	slowPairs map[string]suspect // by "a-b", a < b
	found     []Finding
}

// wrongObs is a group in which some rank received wrong values.
type wrongObs struct {
	Stage string             `json:"stage"`
	Coll  string             `json:"coll"`
	Group []int              `json:"group"` // world ranks in group order
	Bad   []results.Mismatch `json:"bad"`   // Rank is the world rank
	Count int64              `json:"count"`
}

// Run runs every stage on w and returns the report (complete on world
// rank 0). Every process of a distributed world calls it with the same
// options; rank 0 judges and the others follow its decisions.
func Run(ctx context.Context, w suites.World, o Options) (*Report, error) {
	start := time.Now()
	d := &doc{ctx: ctx, w: w, o: o, n: w.Size(), rank0: true, slowRanks: map[int]suspect{}, slowPairs: map[string]suspect{},
		members: map[string][]int{}, devIndex: map[int]int{}, facts: map[string]*HostFacts{}}
	if dist, ok := w.(suites.Distributed); ok && dist.Control() != nil {
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
	stages := []struct {
		name string
		run  func() error
	}{
		{"each " + Unit(o.Backend) + " alone", d.alone},
		{"every " + Unit(o.Backend) + " pair within a host", d.pairs},
		{"across hosts", d.acrossHosts},
		{"the whole world", d.world},
	}
	// A run that stops on a fault still gives rank 0 a verdict: what the
	// finished stages found, and the stage it stopped in.
	stopped := func(stage string, err error) (*Report, error) {
		d.rep.StoppedIn = stage
		if d.rank0 {
			d.assemble()
		}
		d.rep.Healthy = false
		d.rep.Seconds = time.Since(start).Seconds()
		return d.rep, err
	}
	for _, s := range stages {
		if err := ctx.Err(); err != nil {
			return stopped(s.name, err)
		}
		if d.rank0 && o.Progress != nil {
			o.Progress(s.name)
		}
		if err := s.run(); err != nil {
			return stopped(s.name, fmt.Errorf("%s: %w", s.name, err))
		}
		d.rep.Completed = append(d.rep.Completed, s.name)
	}
	if o.BeforeVerdict != nil {
		if err := o.BeforeVerdict(); err != nil {
			return stopped("the verdict", err)
		}
	}
	if d.rank0 {
		d.assemble()
	}
	d.rep.Seconds = time.Since(start).Seconds()
	return d.rep, nil
}

func (d *doc) host(r int) string {
	if r >= 0 && r < len(d.o.Hosts) {
		return d.o.Hosts[r]
	}
	return "localhost"
}

// agree makes every process hold rank 0's value of v.
func (d *doc) agree(v any) error {
	if d.ctl == nil {
		return nil
	}
	var mine []byte
	if d.rank0 {
		var err error
		if mine, err = json.Marshal(v); err != nil {
			return err
		}
	}
	all, err := d.ctl.AllGather(mine)
	if err != nil {
		return err
	}
	return json.Unmarshal(all[0], v)
}

// layout completes groups with a group of one for every other rank.
func (d *doc) layout(groups [][]int) suites.Layout {
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
	return suites.Layout{Spec: spec, Groups: gs}
}

// split returns w split by l (w itself for one group) and its closer.
func (d *doc) split(l suites.Layout) (suites.World, func(), error) {
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
func (d *doc) measureSplit(l suites.Layout, c suites.Collective, sizes []int64, stage string) ([][]*results.Half, error) {
	gw, done, err := d.split(l)
	if err != nil {
		return nil, err
	}
	defer done()
	return d.measure(l, gw, c, sizes, stage)
}

// measure runs c (root 0) on every group of l at sizes and returns each
// size's half per group (complete on rank 0), noting wrong values.
func (d *doc) measure(l suites.Layout, gw suites.World, c suites.Collective, sizes []int64, stage string) ([][]*results.Half, error) {
	op := suites.Sum
	root := -1
	if !c.Reduces() {
		op = suites.NoOp
	}
	if c.Rooted() {
		root = 0
	}
	// Each iteration is timed on its own and the best one counts: a faulty
	// part is slow in every iteration, a healthy one that shares its host's
	// cores or links with others is fast in some.
	plan := suites.Plan{Collectives: []suites.Collective{c}, DTypes: []dtype.DType{dtype.Float32}, Ops: []suites.ReduceOp{suites.Sum},
		Sizes: sizes, Iters: d.o.Iters, Warmup: d.o.Warmup, Check: 1, OutOfPlace: true, Average: suites.AvgMean, Seed: uint64(len(d.rep.Plan) + 1),
		IterStats: true}
	rn := &suites.Runner{World: d.w, Layout: l, Plan: plan, Cases: []suites.Case{{Coll: c, DType: dtype.Float32, Op: op, Root: root}},
		Board: d.o.Board, SkipWorldWarmup: true}
	if len(l.Groups) > 1 {
		rn.Grouped = gw
	}
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
				h.AlgBW = float64(suites.GeometryFor(c, sizes[si], 4, k, 0).Bytes) / (h.TimeUS * 1e3)
				h.BusBW = h.AlgBW * c.BusFactor(k)
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
	return out, nil
}

func (d *doc) step(stage string, round int, l suites.Layout, what string) {
	d.rep.Plan = append(d.rep.Plan, PlanStep{Stage: stage, Round: round, Layout: l.Spec, What: what})
}

// deviceName is a world rank's device model (without the host that the
// cpu backend's device names carry), so like devices are peers.
func (d *doc) deviceName(r int) string {
	if r < len(d.o.Devices) && d.o.Devices[r].Name != "" {
		return strings.TrimSuffix(d.o.Devices[r].Name, " on "+d.host(r))
	}
	return "device"
}

// alone measures every GPU by itself, all at once: a device-to-device copy
// (an out-of-place broadcast in a communicator of one) and the fill
// kernel as a compute probe.
func (d *doc) alone() error {
	singles := make([][]int, d.n)
	for r := range singles {
		singles[r] = []int{r}
	}
	l := suites.Layout{Spec: "singletons", Groups: singles}
	run := func(round int) (map[int]GPUFigure, error) {
		gw, done, err := d.split(l)
		if err != nil {
			return nil, err
		}
		defer done()
		hs, err := d.measure(l, gw, suites.Broadcast, []int64{d.o.CopySize}, "gpu")
		if err != nil {
			return nil, err
		}
		fills, err := d.fillProbe(gw)
		if err != nil {
			return nil, err
		}
		d.step("gpu", round, l, fmt.Sprintf("copy %s on every %s at once, and the fill kernel", bytesName(d.o.CopySize), Unit(d.o.Backend)))
		out := map[int]GPUFigure{}
		for r := 0; r < d.n; r++ {
			g := GPUFigure{Rank: r, Host: d.host(r), Device: d.deviceName(r), FillGelem: fills[r]}
			if r < len(d.o.Devices) {
				g.BusID = d.o.Devices[r].BusID
			}
			if h := hs[0][r]; h != nil {
				g.CopyGBps = h.AlgBW
			}
			out[r] = g
		}
		return out, nil
	}
	figs, err := run(0)
	if err != nil {
		return err
	}
	var sus []suspect
	if d.rank0 {
		for r := 0; r < d.n; r++ {
			d.rep.GPUs = append(d.rep.GPUs, figs[r])
		}
		sus = d.judgeAlone(figs)
	}
	if err := d.agree(&sus); err != nil {
		return err
	}
	// Measure the suspects again before naming them: a suspect that is not
	// slow in one of the attempts is cleared (a faulty part never is fast).
	for attempt := 1; attempt <= confirmAttempts && len(sus) > 0; attempt++ {
		again, err := run(attempt)
		if err != nil {
			return err
		}
		var still []suspect
		if d.rank0 {
			slow := map[string]bool{}
			for _, s := range d.judgeAlone(again) {
				slow[s.Key] = true
			}
			for _, s := range sus {
				if slow[s.Key] {
					still = append(still, s)
				}
			}
		}
		if err := d.agree(&still); err != nil {
			return err
		}
		sus = still
	}
	for _, s := range sus {
		var r int
		fmt.Sscanf(s.Key, "rank %d", &r)
		d.slowRanks[r] = s
	}
	return nil
}

// confirmAttempts is how often a suspect is measured again before it is
// named; one attempt that is not slow clears it.
const confirmAttempts = 3

func (d *doc) judgeAlone(figs map[int]GPUFigure) []suspect {
	var copies, fills []sample
	for r := 0; r < d.n; r++ {
		class := "gpu:" + d.deviceName(r)
		copies = append(copies, sample{Key: fmt.Sprintf("rank %d", r), Class: class, Value: figs[r].CopyGBps})
		fills = append(fills, sample{Key: fmt.Sprintf("rank %d", r), Class: class, Value: figs[r].FillGelem})
	}
	th := d.o.Thresholds
	var out []suspect
	seen := map[string]bool{}
	for _, s := range judge(copies, th) {
		s.Why = fmt.Sprintf("copies at %s GB/s, its peers %s GB/s", gb(s.Value), gb(s.Peers))
		out = append(out, s)
		seen[s.Key] = true
	}
	for _, s := range judge(fills, th) {
		if !seen[s.Key] {
			s.Why = fmt.Sprintf("fills at %s Gelem/s, its peers %s Gelem/s", gb(s.Value), gb(s.Peers))
			out = append(out, s)
		}
	}
	return out
}

// fillProbe times the fill kernel on every rank and returns 1e9 elements/s
// by world rank (on rank 0).
func (d *doc) fillProbe(gw suites.World) (map[int]float64, error) {
	count := d.o.CopySize / 4
	times := map[int]float64{}
	type res struct {
		Rank int     `json:"r"`
		Sec  float64 `json:"s"`
	}
	var mine []res
	ch := make(chan res, len(gw.Ranks()))
	err := gw.Run(func(r suites.Rank) error {
		b, err := r.Alloc(d.o.CopySize)
		if err != nil {
			return err
		}
		defer r.Free(b)
		p := suites.Pattern{DType: dtype.Float32, Domain: suites.DomainFor(suites.AllReduce, dtype.Float32, suites.Sum, 1), Seed: 7, Ranks: 1}
		if err := r.Fill(suites.View{Buf: b}, count, p); err != nil { // the first fill loads the kernel
			return err
		}
		if err := r.Sync(); err != nil {
			return err
		}
		best := 0.0
		for k := 0; k < 3; k++ { // the best of three, as for every figure
			t0 := time.Now()
			if err := r.Fill(suites.View{Buf: b}, count, p); err != nil {
				return err
			}
			if err := r.Sync(); err != nil {
				return err
			}
			if s := time.Since(t0).Seconds(); best == 0 || s < best {
				best = s
			}
		}
		ch <- res{r.WorldRank(), best}
		return nil
	})
	close(ch)
	if err != nil {
		return nil, err
	}
	for x := range ch {
		mine = append(mine, x)
	}
	all := [][]res{mine}
	if d.ctl != nil {
		b, _ := json.Marshal(mine)
		parts, err := d.ctl.Gather(b)
		if err != nil {
			return nil, err
		}
		all = nil
		for _, p := range parts {
			var rs []res
			if json.Unmarshal(p, &rs) == nil {
				all = append(all, rs)
			}
		}
	}
	for _, rs := range all {
		for _, x := range rs {
			if x.Sec > 0 {
				times[x.Rank] = float64(count) / x.Sec / 1e9
			}
		}
	}
	return times, nil
}

// pairKey orders a pair.
func pairKey(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

// pairs measures every pair of GPUs within each host, in rounds of
// disjoint pairs (all hosts at once): one way each direction, both ways at
// once, at the bandwidth size and the latency size.
func (d *doc) pairs() error {
	var rounds [][][2]int
	for _, h := range d.hostList {
		m := d.members[h]
		for k, round := range PairRounds(len(m)) {
			for len(rounds) <= k {
				rounds = append(rounds, nil)
			}
			for _, p := range round {
				rounds[k] = append(rounds[k], [2]int{m[p[0]], m[p[1]]})
			}
		}
	}
	if len(rounds) == 0 {
		return nil
	}
	if d.o.Quick {
		rounds = rounds[:1]
	}
	figs := map[[2]int]PairFigure{}
	for k, pairs := range rounds {
		got, err := d.measurePairs(pairs, "pair", k)
		if err != nil {
			return err
		}
		for key, f := range got {
			figs[key] = f
		}
	}
	var sus []suspect
	if d.rank0 {
		for _, f := range figs {
			d.rep.Pairs = append(d.rep.Pairs, f)
		}
		slices.SortFunc(d.rep.Pairs, func(a, b PairFigure) int {
			if a.A != b.A {
				return a.A - b.A
			}
			return a.B - b.B
		})
		sus = d.judgePairs(figs)
	}
	if err := d.agree(&sus); err != nil {
		return err
	}
	if len(sus) == 0 {
		return nil
	}
	// A pair with a rank already found slow alone is explained by it.
	sus = slices.DeleteFunc(sus, func(s suspect) bool {
		p := parsePair(s.Key)
		_, a := d.slowRanks[p[0]]
		_, b := d.slowRanks[p[1]]
		return a || b
	})
	// Measure the suspects again, only them, in rounds of disjoint pairs;
	// one attempt that is not slow clears a suspect.
	for attempt := 0; attempt < confirmAttempts && len(sus) > 0; attempt++ {
		var again [][][2]int
		for _, s := range sus {
			p := parsePair(s.Key)
			placed := false
			for i := range again {
				if !touches(again[i], p) {
					again[i] = append(again[i], p)
					placed = true
					break
				}
			}
			if !placed {
				again = append(again, [][2]int{p})
			}
		}
		re := map[[2]int]PairFigure{}
		for k, pairs := range again {
			got, err := d.measurePairs(pairs, "pair", len(rounds)+attempt*len(again)+k)
			if err != nil {
				return err
			}
			for key, f := range got {
				re[key] = f
			}
		}
		var still []suspect
		if d.rank0 {
			for _, s := range sus {
				f, ok := re[parsePair(s.Key)]
				if !ok {
					continue
				}
				r := d.o.Thresholds.For(f.Class)
				v := f.metric(s.Metric)
				if v < s.Peers*(1-r.Drop) || (f.Expected > 0 && r.PeakFraction > 0 && v < r.PeakFraction*f.Expected) {
					still = append(still, s)
				}
			}
		}
		if err := d.agree(&still); err != nil {
			return err
		}
		sus = still
	}
	for _, s := range sus {
		d.slowPairs[s.Key] = s
	}
	return nil
}

func parsePair(key string) [2]int {
	var a, b int
	fmt.Sscanf(key, "%d-%d", &a, &b)
	return [2]int{a, b}
}

func touches(round [][2]int, p [2]int) bool {
	for _, q := range round {
		if q[0] == p[0] || q[0] == p[1] || q[1] == p[0] || q[1] == p[1] {
			return true
		}
	}
	return false
}

// measurePairs runs one round of disjoint pairs.
func (d *doc) measurePairs(pairs [][2]int, stage string, round int) (map[[2]int]PairFigure, error) {
	groups := make([][]int, len(pairs))
	rev := make([][]int, len(pairs))
	for i, p := range pairs {
		groups[i] = []int{p[0], p[1]}
		rev[i] = []int{p[1], p[0]}
	}
	l := d.layout(groups)
	gw, done, err := d.split(l)
	if err != nil {
		return nil, err
	}
	both, err := d.measure(l, gw, suites.SendRecv, []int64{d.o.BWSize, d.o.LatSize}, stage)
	if err == nil {
		var ab [][]*results.Half
		if ab, err = d.measure(l, gw, suites.Broadcast, []int64{d.o.BWSize}, stage); err == nil {
			done()
			done = func() {}
			lr := d.layout(rev)
			var gr suites.World
			var closeR func()
			if gr, closeR, err = d.split(lr); err == nil {
				var ba [][]*results.Half
				ba, err = d.measure(lr, gr, suites.Broadcast, []int64{d.o.BWSize}, stage)
				closeR()
				if err == nil {
					d.step(stage, round, l, fmt.Sprintf("sendrecv both ways at %s and %s; broadcast each way at %s",
						bytesName(d.o.BWSize), bytesName(d.o.LatSize), bytesName(d.o.BWSize)))
					out := map[[2]int]PairFigure{}
					for i, p := range pairs {
						class, expected := d.linkClass(p[0], p[1])
						f := PairFigure{A: p[0], B: p[1], Host: d.host(p[0]), Class: class, Expected: expected}
						if h := both[0][i]; h != nil {
							f.Both = h.BusBW
						}
						if h := both[1][i]; h != nil {
							f.LatencyUS = h.TimeUS
						}
						if h := ab[0][i]; h != nil {
							f.AB = h.BusBW
						}
						if h := ba[0][i]; h != nil {
							f.BA = h.BusBW
						}
						out[pairKey(p[0], p[1])] = f
					}
					return out, nil
				}
			}
		}
	}
	done()
	return nil, err
}

// linkClass is the link label between two ranks of a host and the
// bandwidth per direction it should carry (0 when unknown).
func (d *doc) linkClass(a, b int) (string, float64) {
	f := d.facts[d.host(a)]
	ia, oka := d.devIndex[a]
	ib, okb := d.devIndex[b]
	if f == nil || !oka || !okb || ia >= len(f.Matrix) || ib >= len(f.Matrix[ia]) {
		return "same host", 0
	}
	label := f.Matrix[ia][ib]
	var n int
	if _, err := fmt.Sscanf(label, "NV%d", &n); err == nil && n > 0 && ia < len(f.LinkGBps) {
		return label, float64(n) * f.LinkGBps[ia]
	}
	// PCIe: the slower end's generation and width.
	var rate float64
	for _, i := range []int{ia, ib} {
		for _, g := range f.GPUs {
			if g.Index == i {
				r := pcieGBps(g.PCIeGenMax, g.PCIeWidthMax)
				if rate == 0 || (r > 0 && r < rate) {
					rate = r
				}
			}
		}
	}
	return label, rate
}

// pcieGBps is a PCIe link's bandwidth per direction in GB/s.
func pcieGBps(gen, width int) float64 {
	perLane := map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}[gen]
	return perLane * float64(width)
}

func (d *doc) judgePairs(figs map[[2]int]PairFigure) []suspect {
	var oneway, both []sample
	keys := make([][2]int, 0, len(figs))
	for k := range figs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	for _, k := range keys {
		f := figs[k]
		key := fmt.Sprintf("%d-%d", k[0], k[1])
		oneway = append(oneway, sample{Key: key, Class: f.Class, Value: f.oneWay(), Expected: f.Expected})
		both = append(both, sample{Key: key, Class: f.Class, Value: f.Both, Expected: f.Expected})
	}
	var out []suspect
	seen := map[string]bool{}
	for i, list := range [][]suspect{judge(oneway, d.o.Thresholds), judge(both, d.o.Thresholds)} {
		for _, s := range list {
			if !seen[s.Key] {
				seen[s.Key] = true
				s.Metric = []string{"one-way", "both-ways"}[i]
				out = append(out, s)
			}
		}
	}
	return out
}

// metric is a pair's figure by name.
func (f PairFigure) metric(name string) float64 {
	if name == "both-ways" {
		return f.Both
	}
	return f.oneWay()
}

// hostResult is what rank 0 decides about the hosts after a round.
type hostResult struct {
	Suspects []int     `json:"suspects"`
	Healthy  []int     `json:"healthy"`
	Slow     [][2]int  `json:"slow"`  // host pairs that were slow
	Cross    []crossID `json:"cross"` // slow GPU pairs across hosts
	CrossWhy []string  `json:"cross_why"`
	Peers    []float64 `json:"cross_peer"`
}

// crossID names a pair of ranks on two hosts: host indexes and local ranks.
type crossID struct {
	HA int `json:"ha"`
	HB int `json:"hb"`
	LA int `json:"la"`
	LB int `json:"lb"`
}

// CrossRounds schedules every pair of ka local ranks on one host with kb on
// another into rounds of disjoint pairs, max(ka, kb) rounds in all. Round s
// pairs local rank l of the smaller side with l+s (mod the larger side's
// count) of the other; round 0 holds the rails (the same local rank on
// both hosts). Every pair [la, lb] appears exactly once.
func CrossRounds(ka, kb int) [][][2]int {
	if ka < 1 || kb < 1 {
		return nil
	}
	small, big := ka, kb
	if ka > kb {
		small, big = kb, ka
	}
	rounds := make([][][2]int, big)
	for s := 0; s < big; s++ {
		for l := 0; l < small; l++ {
			p := [2]int{l, (l + s) % big}
			if ka > kb {
				p = [2]int{p[1], p[0]}
			}
			rounds[s] = append(rounds[s], p)
		}
	}
	return rounds
}

// acrossHosts pairs hosts once (every host measured with a partner), then
// pairs only the suspects with hosts already seen healthy: a host slow with
// two different partners is the culprit; a pair slow only together is the
// link between them. Within each pair of hosts every GPU of one is measured
// with every GPU of the other (the rails and every other cross pair, as
// alltoall uses them), so a bad cable or switch port seen by only some GPU
// pairs is found. The rounds are bounded by the GPUs per host, whatever the
// number of hosts.
func (d *doc) acrossHosts() error {
	nh := len(d.hostList)
	if nh < 2 {
		return nil
	}
	rounds := HostRounds(nh)
	if d.o.Quick {
		rounds = rounds[:1]
	}
	ran := map[[2]int]bool{}
	var seenPairs []HostPairFigure
	var cross []crossFig
	step := 0
	for _, round := range rounds {
		hp, cf, err := d.measureHostPairs(round, &step)
		if err != nil {
			return err
		}
		seenPairs, cross = append(seenPairs, hp...), append(cross, cf...)
		for _, p := range round {
			ran[pairKey(p[0], p[1])] = true
		}
	}
	// Rank 0 triages; the others follow its list of hosts to pair again.
	var res hostResult
	var slowWith map[int]map[int]bool
	var fine map[int]bool
	// Host pairs whose slowness a slow GPU pair across them explains (known
	// once those are confirmed): the more specific part is named, and the
	// two hosts count as fine with each other.
	explained := map[[2]int]bool{}
	triage := func() {
		res = d.judgeHosts(seenPairs, cross)
		slowWith, fine = map[int]map[int]bool{}, map[int]bool{}
		res.Slow = slices.DeleteFunc(res.Slow, func(p [2]int) bool {
			if explained[pairKey(p[0], p[1])] {
				fine[p[0]], fine[p[1]] = true, true
				return true
			}
			return false
		})
		for _, p := range res.Slow {
			for _, x := range [][2]int{{p[0], p[1]}, {p[1], p[0]}} {
				if slowWith[x[0]] == nil {
					slowWith[x[0]] = map[int]bool{}
				}
				slowWith[x[0]][x[1]] = true
			}
		}
		for _, h := range res.Healthy {
			fine[h] = true
		}
		_, res.Suspects = Triage(nh, slowWith, fine)
	}
	if d.rank0 {
		triage()
	}
	if err := d.agree(&res); err != nil {
		return err
	}
	if !d.o.Quick && len(res.Suspects) > 0 && len(res.Healthy) > 0 {
		for _, round := range Repair(res.Suspects, res.Healthy, func(a, b int) bool { return ran[pairKey(a, b)] }) {
			hp, cf, err := d.measureHostPairs(round, &step)
			if err != nil {
				return err
			}
			seenPairs, cross = append(seenPairs, hp...), append(cross, cf...)
		}
		if d.rank0 {
			triage()
		}
		if err := d.agree(&res); err != nil {
			return err
		}
	}
	// Measure slow cross pairs again, only them, in rounds of disjoint
	// pairs; one attempt that is not slow clears a pair. A pair with a rank
	// already found slow alone is explained by it.
	var ids []crossID
	var why []string
	var peers []float64
	for i, c := range res.Cross {
		_, a := d.slowRanks[d.crossRank(c, 0)]
		_, b := d.slowRanks[d.crossRank(c, 1)]
		if !a && !b {
			ids, why, peers = append(ids, c), append(why, res.CrossWhy[i]), append(peers, res.Peers[i])
		}
	}
	for attempt := 0; attempt < confirmAttempts && len(ids) > 0; attempt++ {
		var again [][]int // indexes into ids, per round of disjoint pairs
		var placed [][][2]int
		for i, c := range ids {
			p := [2]int{d.crossRank(c, 0), d.crossRank(c, 1)}
			k := 0
			for k < len(placed) && touches(placed[k], p) {
				k++
			}
			if k == len(placed) {
				placed, again = append(placed, nil), append(again, nil)
			}
			placed[k], again[k] = append(placed[k], p), append(again[k], i)
		}
		slow := make([]bool, len(ids))
		for k, round := range placed {
			groups := make([][]int, len(round))
			for i, p := range round {
				groups[i] = []int{p[0], p[1]}
			}
			l := d.layout(groups)
			hs, err := d.measureSplit(l, suites.SendRecv, []int64{d.o.BWSize}, "host")
			if err != nil {
				return err
			}
			d.step("host", step, l, fmt.Sprintf("slow pairs across hosts again: sendrecv both ways at %s", bytesName(d.o.BWSize)))
			step++
			if d.rank0 {
				for gi, i := range again[k] {
					drop := d.o.Thresholds.For(crossClass(ids[i])).Drop
					if h := hs[0][gi]; h != nil && h.BusBW < peers[i]*(1-drop) {
						slow[i] = true
					}
				}
			}
		}
		type kept struct {
			IDs   []crossID `json:"c"`
			Why   []string  `json:"w"`
			Peers []float64 `json:"p"`
		}
		var k kept
		if d.rank0 {
			for i := range ids {
				if slow[i] {
					k.IDs, k.Why, k.Peers = append(k.IDs, ids[i]), append(k.Why, why[i]), append(k.Peers, peers[i])
				}
			}
		}
		if err := d.agree(&k); err != nil {
			return err
		}
		ids, why, peers = k.IDs, k.Why, k.Peers
	}
	if !d.rank0 {
		return nil
	}
	for _, c := range ids {
		explained[pairKey(c.HA, c.HB)] = true
	}
	triage()
	// Name hosts slow with two different partners; otherwise the link.
	culprits, _ := Triage(nh, slowWith, fine)
	named := map[int]bool{}
	for _, h := range culprits {
		named[h] = true
		ps := sortedKeys(slowWith[h])
		var names []string
		for _, p := range ps {
			names = append(names, d.hostList[p])
		}
		d.found = append(d.found, Finding{Severity: "FAIL", Stage: "host", Kind: "slow-host", Part: "host " + d.hostList[h],
			Host: d.hostList[h], Msg: fmt.Sprintf("slow with %d different partner hosts (%s)", len(ps), strings.Join(names, ", ")),
			Cause: "this host's network path (NICs, cables, switch ports) or its GPUs"})
	}
	for _, p := range res.Slow {
		if named[p[0]] || named[p[1]] {
			continue
		}
		a, b := d.hostList[p[0]], d.hostList[p[1]]
		msg := "slow together, each fine with another partner"
		if !fine[p[0]] || !fine[p[1]] {
			msg = "slow together; no other partner was left to tell the host from the link"
		}
		d.found = append(d.found, Finding{Severity: "FAIL", Stage: "host", Kind: "slow-host-link", Part: "hosts " + a + " ↔ " + b,
			Msg: msg, Cause: "the network path between these hosts"})
	}
	d.nameCross(ids, why, peers, cross, named)
	return nil
}

// crossRank is the world rank of one side (0 or 1) of a cross pair.
func (d *doc) crossRank(c crossID, side int) int {
	if side == 0 {
		return d.members[d.hostList[c.HA]][c.LA]
	}
	return d.members[d.hostList[c.HB]][c.LB]
}

// nameCross turns the confirmed slow pairs across hosts into findings. A
// rank slow with more than half of the partners it met on other hosts (two
// at least) is named by its own network path (its NIC, cable, switch port);
// the rest are named as the path between the two GPUs: a rail, or a cross
// pair of different local ranks.
func (d *doc) nameCross(ids []crossID, why []string, peers []float64, all []crossFig, namedHosts map[int]bool) {
	met, slowWith := map[int]map[int]bool{}, map[int]map[int]bool{}
	add := func(m map[int]map[int]bool, a, b int) {
		if m[a] == nil {
			m[a] = map[int]bool{}
		}
		m[a][b] = true
	}
	for _, c := range all {
		add(met, c.A, c.B)
		add(met, c.B, c.A)
	}
	for _, c := range ids {
		a, b := d.crossRank(c, 0), d.crossRank(c, 1)
		add(slowWith, a, b)
		add(slowWith, b, a)
	}
	nic := map[int]bool{}
	for _, r := range sortedKeys(slowWith) {
		if n := len(slowWith[r]); n >= 2 && 2*n > len(met[r]) {
			nic[r] = true
			partners := sortedKeys(slowWith[r])
			var names []string
			for _, p := range partners {
				names = append(names, fmt.Sprint(p))
			}
			d.found = append(d.found, Finding{Severity: "FAIL", Stage: "host", Kind: "slow-nic", Part: d.o.Who(r) + " network path",
				Host: d.host(r), Ranks: []int{r},
				Msg:   fmt.Sprintf("slow with %d of the %d ranks it met on other hosts (ranks %s), fine alone and within its host", n, len(met[r]), strings.Join(names, ", ")),
				Cause: "this GPU's NIC, cable or switch port"})
		}
	}
	for i, c := range ids {
		if namedHosts[c.HA] || namedHosts[c.HB] {
			continue
		}
		a, b := d.crossRank(c, 0), d.crossRank(c, 1)
		if nic[a] || nic[b] {
			continue
		}
		f := Finding{Severity: "FAIL", Stage: "host", Ranks: []int{a, b}, Msg: why[i], Peers: peers[i], Unit: "GB/s"}
		if c.LA == c.LB {
			f.Kind, f.Part, f.Cause = "slow-rail", fmt.Sprintf("rail %d: %s ↔ %s", c.LA, d.o.Who(a), d.o.Who(b)), "the NIC, cable or switch port of this rail"
		} else {
			f.Kind, f.Part = "slow-cross-link", fmt.Sprintf("%s ↔ %s", d.o.Who(a), d.o.Who(b))
			f.Cause = fmt.Sprintf("the path between local rank %d of %s and local rank %d of %s (a cable or switch port that only their traffic crosses)",
				c.LA, d.hostList[c.HA], c.LB, d.hostList[c.HB])
		}
		d.found = append(d.found, f)
	}
}

// crossFig is one pair across hosts as measured (every process has the
// ranks; rank 0 the figure).
type crossFig struct {
	crossID
	A, B int // world ranks
	Both float64
}

// measureHostPairs measures, for each host pair of round, every pair of
// ranks across the two hosts, in rounds of disjoint pairs (CrossRounds: the
// rails first), all host pairs at once, and an allreduce over both hosts'
// ranks. step numbers the plan's rounds and advances.
func (d *doc) measureHostPairs(round [][2]int, step *int) ([]HostPairFigure, []crossFig, error) {
	var shifts [][]crossFig
	var unions [][]int
	for _, p := range round {
		ma, mb := d.members[d.hostList[p[0]]], d.members[d.hostList[p[1]]]
		for s, pairs := range CrossRounds(len(ma), len(mb)) {
			for len(shifts) <= s {
				shifts = append(shifts, nil)
			}
			for _, l := range pairs {
				shifts[s] = append(shifts[s], crossFig{crossID: crossID{HA: p[0], HB: p[1], LA: l[0], LB: l[1]}, A: ma[l[0]], B: mb[l[1]]})
			}
		}
		unions = append(unions, append(append([]int(nil), ma...), mb...))
	}
	var cross []crossFig
	for s, figs := range shifts {
		groups := make([][]int, len(figs))
		for i, f := range figs {
			groups[i] = []int{f.A, f.B}
		}
		l := d.layout(groups)
		hs, err := d.measureSplit(l, suites.SendRecv, []int64{d.o.BWSize}, "host")
		if err != nil {
			return nil, nil, err
		}
		what := "rails"
		if s > 0 {
			what = fmt.Sprintf("local rank l with l+%d on the other host", s)
		}
		d.step("host", *step, l, fmt.Sprintf("%s: sendrecv both ways at %s", what, bytesName(d.o.BWSize)))
		*step++
		for i := range figs {
			if h := hs[0][i]; h != nil {
				figs[i].Both = h.BusBW
			}
		}
		cross = append(cross, figs...)
	}
	lu := d.layout(unions)
	hu, err := d.measureSplit(lu, suites.AllReduce, []int64{d.o.BWSize}, "host")
	if err != nil {
		return nil, nil, err
	}
	d.step("host", *step, lu, fmt.Sprintf("host pairs: allreduce at %s", bytesName(d.o.BWSize)))
	*step++
	var out []HostPairFigure
	if d.rank0 {
		for _, c := range cross {
			d.rep.Cross = append(d.rep.Cross, CrossFigure{HostA: d.hostList[c.HA], HostB: d.hostList[c.HB], A: c.A, B: c.B, LocalA: c.LA, LocalB: c.LB, Both: c.Both})
		}
		for i, p := range round {
			f := HostPairFigure{A: d.hostList[p[0]], B: d.hostList[p[1]], Round: *step - 1}
			if h := hu[0][i]; h != nil {
				f.BusBW = h.BusBW
			}
			d.rep.HostPair = append(d.rep.HostPair, f)
			out = append(out, f)
		}
	}
	return out, cross, nil
}

// crossClass is the link class of a pair across hosts: "rail" for the same
// local rank on both hosts, "cross-rail" for the rest (in a rail-optimised
// fabric those cross a spine or another GPU's NIC, and are their own peers).
func crossClass(c crossID) string {
	if c.LA == c.LB {
		return "rail"
	}
	return "cross-rail"
}

// judgeHosts finds slow host pairs and slow GPU pairs across hosts among
// everything measured.
func (d *doc) judgeHosts(pairs []HostPairFigure, cross []crossFig) hostResult {
	idx := map[string]int{}
	for i, h := range d.hostList {
		idx[h] = i
	}
	peak := d.nicPeak()
	var ss []sample
	for _, p := range pairs {
		ss = append(ss, sample{Key: p.A + "|" + p.B, Class: "host-pair", Value: p.BusBW, Expected: peak})
	}
	var res hostResult
	slow, fine := map[int]bool{}, map[int]bool{}
	flagged := map[string]bool{}
	for _, s := range judge(ss, d.o.Thresholds) {
		a, b, _ := strings.Cut(s.Key, "|")
		res.Slow = append(res.Slow, [2]int{idx[a], idx[b]})
		slow[idx[a]], slow[idx[b]] = true, true
		flagged[s.Key] = true
	}
	for _, p := range pairs {
		if !flagged[p.A+"|"+p.B] {
			fine[idx[p.A]], fine[idx[p.B]] = true, true
		}
	}
	var cs []sample
	byKey := map[string]crossID{}
	for _, c := range cross {
		key := fmt.Sprintf("%d|%d|%d|%d", c.HA, c.HB, c.LA, c.LB)
		byKey[key] = c.crossID
		cs = append(cs, sample{Key: key, Class: crossClass(c.crossID), Value: c.Both, Expected: peak})
	}
	for _, s := range judge(cs, d.o.Thresholds) {
		res.Cross = append(res.Cross, byKey[s.Key])
		others := "the other rails"
		if s.Class != "rail" {
			others = "the other pairs of different local ranks across hosts"
		}
		res.CrossWhy = append(res.CrossWhy, fmt.Sprintf("%s GB/s both ways, %s %s GB/s%s", gb(s.Value), others, gb(s.Peers), drop(s.Value, s.Peers)))
		res.Peers = append(res.Peers, s.Peers)
	}
	// A host seen fine with one partner is cleared; one only seen slow is a
	// suspect, paired next with a host already seen fine.
	for h := range d.hostList {
		switch {
		case fine[h]:
			res.Healthy = append(res.Healthy, h)
		case slow[h]:
			res.Suspects = append(res.Suspects, h)
		}
	}
	return res
}

// nicPeak is the slowest active InfiniBand/RoCE port's rate in GB/s over
// every host's facts, 0 when unknown.
func (d *doc) nicPeak() float64 {
	peak := 0.0
	for _, f := range d.o.Facts {
		for _, n := range f.NICs {
			if n.Kind != "ethernet" && n.RateGbps > 0 && strings.EqualFold(n.State, "ACTIVE") {
				if r := n.RateGbps / 8; peak == 0 || r < peak {
					peak = r
				}
			}
		}
	}
	return peak
}

// world runs an allreduce over every rank at a large size and compares it
// with the topology's expectation; when it falls short and no stage named
// anything, it bisects the world down to the smallest group that still
// falls short.
func (d *doc) world() error {
	if d.n < 2 {
		return nil
	}
	expected := d.worldPeak()
	measureGroups := func(groups [][]int, round int) ([]float64, error) {
		l := d.layout(groups)
		hs, err := d.measureSplit(l, suites.AllReduce, []int64{d.o.WorldSize}, "world")
		if err != nil {
			return nil, err
		}
		d.step("world", round, l, fmt.Sprintf("allreduce at %s", bytesName(d.o.WorldSize)))
		out := make([]float64, len(groups))
		for i := range groups {
			if h := hs[0][i]; h != nil {
				out[i] = h.BusBW
			}
		}
		return out, nil
	}
	all := make([]int, d.n)
	for i := range all {
		all[i] = i
	}
	bw, err := measureGroups([][]int{all}, 0)
	if err != nil {
		return err
	}
	r := d.o.Thresholds.For("world")
	short := func(v float64) bool { return expected > 0 && r.PeakFraction > 0 && v < r.PeakFraction*expected }
	if d.rank0 {
		d.rep.World = &WorldFigure{Ranks: d.n, Bytes: d.o.WorldSize, BusBW: bw[0], Expected: expected}
	}
	type decision struct {
		Bisect bool `json:"bisect"`
	}
	dec := decision{}
	if d.rank0 {
		dec.Bisect = short(bw[0]) && !d.o.Quick && len(d.slowRanks) == 0 && len(d.slowPairs) == 0 && len(d.found) == 0 && len(d.wrong) == 0
	}
	if err := d.agree(&dec); err != nil {
		return err
	}
	if !dec.Bisect {
		if d.rank0 && short(bw[0]) {
			d.found = append(d.found, Finding{Severity: "FAIL", Stage: "world", Kind: "slow-world", Part: fmt.Sprintf("the world of %d ranks", d.n),
				Value: bw[0], Expected: expected, Unit: "GB/s", Msg: fmt.Sprintf("allreduce busbw %s GB/s, %.0f%% of the %s GB/s expected", gb(bw[0]), bw[0]/expected*100, gb(expected)),
				Cause: "see the findings above"})
		}
		return nil
	}
	group := all
	for round := 1; len(group) > 2; round++ {
		a, b := Halves(group)
		bws, err := measureGroups([][]int{a, b}, round)
		if err != nil {
			return err
		}
		type next struct {
			Group []int  `json:"group"`
			Stop  bool   `json:"stop"`
			Note  string `json:"note"`
		}
		var nx next
		if d.rank0 {
			sa, sb := short(bws[0]), short(bws[1])
			switch {
			case sa && !sb:
				nx = next{Group: a, Note: fmt.Sprintf("%v short (%s GB/s), %v fine (%s GB/s)", a, gb(bws[0]), b, gb(bws[1]))}
			case sb && !sa:
				nx = next{Group: b, Note: fmt.Sprintf("%v short (%s GB/s), %v fine (%s GB/s)", b, gb(bws[1]), a, gb(bws[0]))}
			default:
				nx = next{Group: group, Stop: true, Note: fmt.Sprintf("halves %v (%s GB/s) and %v (%s GB/s): the shortfall needs the whole group", a, gb(bws[0]), b, gb(bws[1]))}
			}
			d.rep.World.Bisect = append(d.rep.World.Bisect, nx.Note)
		}
		if err := d.agree(&nx); err != nil {
			return err
		}
		group = nx.Group
		if nx.Stop {
			break
		}
	}
	if d.rank0 {
		names := make([]string, len(group))
		for i, r := range group {
			names[i] = d.o.Who(r)
		}
		d.found = append(d.found, Finding{Severity: "FAIL", Stage: "world", Kind: "slow-world", Part: strings.Join(names, ", "), Ranks: group,
			Value: bw[0], Expected: expected, Unit: "GB/s",
			Msg:   fmt.Sprintf("the whole world's allreduce reached %s GB/s of %s expected; this is the smallest group that still falls short", gb(bw[0]), gb(expected)),
			Cause: "no single GPU, pair or host stood out: a shared path (a switch, a PCIe root complex)"})
	}
	return nil
}

// worldPeak is what the world's allreduce busbw should approach: the
// NVLink peak on one host, the NIC peak across hosts; 0 when unknown.
func (d *doc) worldPeak() float64 {
	if len(d.hostList) > 1 {
		return d.nicPeak()
	}
	f := d.facts[d.hostList[0]]
	if f == nil || len(f.GPUs) == 0 {
		return 0
	}
	peak := 0.0
	for i, g := range f.GPUs {
		if i >= len(f.LinkGBps) || f.LinkGBps[i] <= 0 || g.NVLinksActive == 0 {
			return 0
		}
		p := float64(g.NVLinksActive) * f.LinkGBps[i]
		if peak == 0 || p < peak {
			peak = p
		}
	}
	return peak
}

// Unit is what one rank drives on a backend, for the report's words: a GPU,
// or on the cpu backend a rank (its memory and its thread).
func Unit(backend string) string {
	if backend == "cpu" {
		return "rank"
	}
	return "GPU"
}
