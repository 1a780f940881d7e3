package doctor

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/dtype"
	"collbench/internal/words"
	"collbench/measure"
)

// aloneStage measures each GPU (or host-memory rank) alone: its copy and
// fill rates against its peers and its model's expectation.
type aloneStage struct{}

func (aloneStage) Name(s *site) string { return "each " + facts.Unit(s.o.Backend) + " alone" }
func (aloneStage) Skip(*site) string   { return "" }
func (aloneStage) Run(m *meter, _ outcome) (outcome, error) {
	d := &aloneRun{meter: m, outcome: outcome{slowRanks: map[int]rules.Suspect{}}}
	err := d.alone()
	return d.outcome, err
}

// aloneRun is one run of the stage: the ranks it finds slow alone.
type aloneRun struct {
	*meter
	outcome
}

// alone measures every GPU by itself, all at once: a device-to-device copy
// (an out-of-place broadcast in a communicator of one) and the fill
// kernel as a compute probe.
func (d *aloneRun) alone() error {
	singles := make([][]int, d.n)
	for r := range singles {
		singles[r] = []int{r}
	}
	l := measure.Layout{Spec: "singletons", Groups: singles}
	run := func(round int) (map[int]record.GPUFigure, error) {
		gw, done, err := d.split(l)
		if err != nil {
			return nil, err
		}
		defer done()
		hs, err := d.measure(l, gw, measure.Broadcast, []int64{d.o.CopySize}, "gpu")
		if err != nil {
			return nil, err
		}
		fills, err := d.fillProbe(gw)
		if err != nil {
			return nil, err
		}
		d.step("gpu", round, l, fmt.Sprintf("copy %s on every %s at once, and %s", words.Bytes(d.o.CopySize), facts.Unit(d.o.Backend), fillName(d.o.Backend)))
		out := map[int]record.GPUFigure{}
		for r := 0; r < d.n; r++ {
			g := record.GPUFigure{Rank: r, Host: d.host(r), Device: d.deviceName(r), FillGelem: fills[r].Gelem,
				FillSustained: fills[r].Sustained, SustainedMS: fills[r].WindowMS}
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
	var sus []rules.Suspect
	if d.rank0 {
		d.recordGPUs(figs)
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
		var still []rules.Suspect
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
		if _, err := fmt.Sscanf(s.Key, "rank %d", &r); err != nil {
			continue // every key of this stage is "rank N"
		}
		d.slowRanks[r] = s
	}
	return nil
}

// judgeAlone finds the GPUs slow alone: against what a healthy one of
// their model does (copy, fill), against their own single kernels (the
// time share a sustained loop gets), then against their peers.
func (d *aloneRun) judgeAlone(figs map[int]record.GPUFigure) []rules.Suspect {
	var copies, fills []rules.Sample
	for r := 0; r < d.n; r++ {
		class := "gpu:" + d.deviceName(r)
		copies = append(copies, rules.Sample{Key: fmt.Sprintf("rank %d", r), Class: class, Value: figs[r].CopyGBps})
		fills = append(fills, rules.Sample{Key: fmt.Sprintf("rank %d", r), Class: class, Value: figs[r].FillGelem})
	}
	th := d.o.Thresholds
	var out []rules.Suspect
	seen := map[string]bool{}
	// Against what the hardware should do: a GPU, or every GPU of a host
	// alike, that copies well below what a healthy one of its model does.
	for r := 0; r < d.n; r++ {
		exp, _ := d.expectedCopy(r)
		fillExp, _ := d.expectedFill(r)
		gpuRules := th.For("gpu:" + d.deviceName(r))
		key := fmt.Sprintf("rank %d", r)
		switch v, f := figs[r].CopyGBps, figs[r].FillGelem; {
		case exp > 0 && v < (1-gpuRules.Drop)*exp:
			out = append(out, rules.Suspect{Sample: rules.Sample{Key: key, Class: "gpu:" + d.deviceName(r), Value: v, Expected: exp}, Peers: exp, Metric: "expectation",
				Why: fmt.Sprintf("copies at %s GB/s, %.0f%% below the %s GB/s a healthy one of its model copies", facts.GB(v), (1-v/exp)*100, facts.GB(exp))})
			seen[key] = true
		case fillExp > 0 && f < (1-gpuRules.Drop)*fillExp:
			out = append(out, rules.Suspect{Sample: rules.Sample{Key: key, Class: "gpu:" + d.deviceName(r), Value: f, Expected: fillExp}, Peers: fillExp, Metric: "expectation",
				Why: fmt.Sprintf("fills at %s Gelem/s, %.0f%% below the %s Gelem/s a healthy one of its model fills", facts.GB(f), (1-f/fillExp)*100, facts.GB(fillExp))})
			seen[key] = true
		case figs[r].FillSustained > 0 && f > 0 && figs[r].FillSustained < (1-gpuRules.Drop)*f:
			// Each kernel runs at full speed, but a loop of them gets only
			// part of the GPU's time: another workload's time slices.
			sus := figs[r].FillSustained
			out = append(out, rules.Suspect{Sample: rules.Sample{Key: key, Class: "gpu:" + d.deviceName(r), Value: sus, Expected: f}, Peers: f, Metric: "time share",
				Why: fmt.Sprintf("gives its user only %.0f%% of its time: %s Gelem/s over %.3g ms of fill kernels, where each kernel alone fills at %s Gelem/s (the driver time-slices it with another workload)",
					sus/f*100, facts.GB(sus), figs[r].SustainedMS, facts.GB(f))})
			seen[key] = true
		}
	}
	for _, s := range rules.Judge(copies, th) {
		if seen[s.Key] {
			continue
		}
		s.Why = fmt.Sprintf("copies at %s GB/s, its peers %s GB/s", facts.GB(s.Value), facts.GB(s.Peers))
		out = append(out, s)
		seen[s.Key] = true
	}
	for _, s := range rules.Judge(fills, th) {
		if !seen[s.Key] {
			s.Why = fmt.Sprintf("fills at %s Gelem/s, its peers %s Gelem/s", facts.GB(s.Value), facts.GB(s.Peers))
			out = append(out, s)
		}
	}
	return out
}

// fillName is the compute probe's name in the report's words: a kernel on
// a GPU, a loop on a host-memory backend.
func fillName(backend string) string {
	if facts.HostMemory(backend) {
		return "the fill loop"
	}
	return "the fill kernel"
}

// fillProbe times the fill kernel on every rank and returns, by world rank
// (on rank 0), its rate in 1e9 elements/s two ways: the best of three
// kernels each timed by the device's events (what the GPU can do: a
// kernel fits inside one of the driver's time slices), and where the
// device has events, a loop of kernels spanning at least SustainWindow
// timed as a whole (what a user of the GPU gets: another workload's time
// slices fall inside it).
func (d *aloneRun) fillProbe(gw measure.World) (map[int]fillFigure, error) {
	count := d.o.CopySize / 4
	type res struct {
		Rank int     `json:"r"`
		Sec  float64 `json:"s"`
		Sus  float64 `json:"u,omitempty"` // seconds per kernel over the loop
		Win  float64 `json:"w,omitempty"` // the loop's seconds
	}
	var mine []res
	ch := make(chan res, len(gw.Ranks()))
	err := gw.Run(func(r measure.Rank) error {
		b, err := r.Alloc(d.o.CopySize)
		if err != nil {
			return err
		}
		defer func() { _ = r.Free(b) }() // a free that fails changes no figure measured
		p := measure.Pattern{DType: dtype.Float32, Domain: measure.DomainFor(measure.AllReduce, dtype.Float32, measure.Sum, 1), Seed: 7, Ranks: 1}
		if err := r.Fill(measure.View{Buf: b}, count, p); err != nil { // the first fill loads the kernel
			return err
		}
		if err := r.Sync(); err != nil {
			return err
		}
		fill := func() error { return r.Fill(measure.View{Buf: b}, count, p) }
		dt, onDevice := r.(measure.DeviceTimer)
		best := 0.0
		for k := 0; k < 3; k++ { // the best of three, as for every figure
			var s float64
			if onDevice {
				// The kernel's own time, by the device's events.
				if s, err = dt.TimeOnDevice(fill); err != nil {
					return err
				}
			} else {
				t0 := time.Now()
				if err := fill(); err != nil {
					return err
				}
				if err := r.Sync(); err != nil {
					return err
				}
				s = time.Since(t0).Seconds()
			}
			if best == 0 || s < best {
				best = s
			}
		}
		out := res{Rank: r.WorldRank(), Sec: best}
		if onDevice && best > 0 {
			k := sustainedKernels(best)
			loop := func() error {
				for i := 0; i < k; i++ {
					if err := fill(); err != nil {
						return err
					}
				}
				return nil
			}
			s, err := dt.TimeOnDevice(loop)
			if err != nil {
				return err
			}
			if s > 0 {
				out.Sus, out.Win = s/float64(k), s
			}
		}
		ch <- out
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
	figs := map[int]fillFigure{}
	for _, rs := range all {
		for _, x := range rs {
			var f fillFigure
			if x.Sec > 0 {
				f.Gelem = float64(count) / x.Sec / 1e9
			}
			if x.Sus > 0 {
				f.Sustained, f.WindowMS = float64(count)/x.Sus/1e9, x.Win*1e3
			}
			figs[x.Rank] = f
		}
	}
	return figs, nil
}

// fillFigure is one rank's fill rates (see fillProbe).
type fillFigure struct {
	Gelem, Sustained, WindowMS float64
}

// SustainWindow is how long the sustained fill loop runs at least: many of
// the driver's time slices (a few ms each), so that a workload sharing the
// GPU takes its part of it. A variable for tests on modeled machines, whose
// kernels and time slices are short.
var SustainWindow = 100 * time.Millisecond

// sustainedKernels is how many kernels of one's seconds make up the
// sustained loop: SustainWindow of them, within bounds that keep a tiny
// kernel's loop short to issue and a huge kernel's loop several kernels.
func sustainedKernels(one float64) int {
	k := int(math.Ceil(SustainWindow.Seconds() / one))
	return min(max(k, 8), 512)
}

// recordGPUs puts each rank's figures in the report with what its GPU
// should do, and says which had no expectation and why.
func (d *aloneRun) recordGPUs(figs map[int]record.GPUFigure) {
	unexpected := map[string][]int{}
	for r := 0; r < d.n; r++ {
		f := figs[r]
		if exp, why := d.expectedCopy(r); exp > 0 {
			f.CopyExpected = exp
		} else {
			unexpected["the copy: "+why] = append(unexpected["the copy: "+why], r)
		}
		if exp, why := d.expectedFill(r); exp > 0 {
			f.FillExpected = exp
		} else {
			key := fillName(d.o.Backend) + ": " + why
			unexpected[key] = append(unexpected[key], r)
		}
		d.rep.GPUs = append(d.rep.GPUs, f)
	}
	for _, why := range facts.SortedKeys(unexpected) {
		who := ranksWord(unexpected[why])
		if len(unexpected[why]) == d.n && d.n > 1 {
			who = fmt.Sprintf("all %d ranks", d.n)
		}
		what, reason, _ := strings.Cut(why, ": ")
		d.rep.NoExpectation = append(d.rep.NoExpectation, fmt.Sprintf("%s of %s judged against their peers only: %s", what, who, reason))
	}
}

// expectedCopy is the copy rate rank r's GPU should reach alone, or 0 and
// why no expectation can be formed.
func (d *aloneRun) expectedCopy(r int) (float64, string) {
	return d.expected(r, "the "+d.o.Backend+" backend's ranks share the host's memory, with no limit of their own to expect", rules.ExpectedCopyGBps)
}

// expectedFill is the fill rate rank r's GPU should reach alone, or 0 and
// why no expectation can be formed.
func (d *aloneRun) expectedFill(r int) (float64, string) {
	return d.expected(r, "the "+d.o.Backend+" backend's ranks share the host's cores", rules.ExpectedFillGelem)
}

// expected asks rank r's GPU health for one expectation; on a host-memory
// backend there is none, for the reason cpuWhy.
func (d *aloneRun) expected(r int, cpuWhy string, of func(facts.GPUHealth, rules.Expectations) (float64, string)) (float64, string) {
	if facts.HostMemory(d.o.Backend) {
		return 0, cpuWhy
	}
	g, ok := d.health(r)
	if !ok {
		return 0, "no NVML facts for its GPU"
	}
	return of(g, d.o.Expectations)
}

// ranksWord is "rank 3" or "ranks 0, 1, 2".
func ranksWord(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + words.Ints(rs)
}
