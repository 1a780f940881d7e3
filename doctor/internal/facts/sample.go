package facts

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// StageSample is what NVML reported of one GPU while one stage ran: the
// range of its SM clock, its highest power draw and temperature, and every
// clock event reason seen at least once.
type StageSample struct {
	Host          string   `json:"host"`
	GPU           int      `json:"gpu"`
	BusID         string   `json:"bus_id,omitempty"`
	Stage         string   `json:"stage"`
	Samples       int      `json:"samples"`
	SMClockMinMHz int      `json:"sm_clock_min_mhz,omitempty"`
	SMClockMaxMHz int      `json:"sm_clock_max_mhz,omitempty"`
	PowerMaxW     int      `json:"power_max_w,omitempty"`
	PowerLimitW   int      `json:"power_limit_w,omitempty"` // the enforced limit
	TempMaxC      int      `json:"temp_max_c,omitempty"`
	Reasons       []string `json:"reasons,omitempty"`
	// UtilMinPct and UtilMaxPct are the range of NVML's utilisation (the
	// share of time a kernel ran); in the idle stage, before doctor runs
	// anything, a GPU busy throughout is someone else's work.
	UtilMinPct int `json:"util_min_pct,omitempty"`
	UtilMaxPct int `json:"util_max_pct,omitempty"`
	// Processes are the compute processes NVML listed on the GPU during
	// the stage (this world's own among them).
	Processes []GPUProcess `json:"processes,omitempty"`
}

// IdleStage is the stage name of the samples taken while doctor runs
// nothing (Sampler.Idle).
const IdleStage = "idle"

// clockReasons are NVML's clock event reasons a slow GPU is explained by
// (idle, sync boost and the display clock explain nothing); fault marks
// those that mean something is wrong whenever they are on (the health
// facts' "clocks held down"): a power cap under load, or application
// clocks as set, are normal.
var clockReasons = []struct {
	bit   uint64
	name  string
	fault bool
}{
	{nvml.ClocksEventReasonApplicationsClocksSetting, "application clocks setting", false},
	{nvml.ClocksEventReasonSwPowerCap, "software power cap", false},
	{nvml.ClocksThrottleReasonHwSlowdown, "hardware slowdown", true},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hardware thermal slowdown", true},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "power brake", true},
	{nvml.ClocksEventReasonSwThermalSlowdown, "software thermal slowdown", true},
}

// Sampler reads some GPUs' clocks, power, temperature and clock event
// reasons through NVML (initialised by the caller) at an interval, and
// keeps each stage's range per GPU. Its methods are safe to call from any
// goroutine.
type Sampler struct {
	host  string
	every time.Duration
	gpus  []sampled
	stop  chan struct{}
	done  chan struct{}

	stopOnce sync.Once
	onStop   func()

	mu    sync.Mutex
	stage string
	by    map[string]*StageSample // stage and GPU index
	order []string

	// The error counters: the sysfs root whose InfiniBand ports are read
	// ("" none), the stage whose counters were read at its start, when it
	// started and what they were, and what grew in the stages so far
	// (XID events included).
	cmu         sync.Mutex // the counters' state below
	ports       string
	countStage  string
	countT0     time.Time
	countBefore snapshot
	growth      []CounterGrowth
	watched     string // what the first reading found, in words
	events      nvml.EventSet
	eventsDone  chan struct{}
}

type sampled struct {
	index int
	bus   string
	dev   nvml.Device
}

// NewSampler samples the GPUs of lib whose bus ids are busIDs (all of them
// when busIDs is empty) every interval until Stop; a nil lib samples none.
func NewSampler(lib nvml.Interface, host string, busIDs []string, every time.Duration) *Sampler {
	s := &Sampler{host: host, every: every, stop: make(chan struct{}), done: make(chan struct{}), by: map[string]*StageSample{}}
	want := map[string]bool{}
	for _, b := range busIDs {
		want[normBus(b)] = true
	}
	n, ret := 0, nvml.ERROR_UNINITIALIZED
	if lib != nil {
		n, ret = lib.DeviceGetCount()
	}
	if ret == nvml.SUCCESS {
		for i := 0; i < n; i++ {
			d, ret := lib.DeviceGetHandleByIndex(i)
			if ret != nvml.SUCCESS {
				continue
			}
			bus := ""
			if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
				bus = normBus(string(trimNul(pci.BusId[:])))
			}
			if len(want) == 0 || want[bus] {
				s.gpus = append(s.gpus, sampled{index: i, bus: bus, dev: d})
			}
		}
	}
	if lib != nil && len(s.gpus) > 0 {
		s.watchXIDs(lib)
	}
	go s.run()
	return s
}

// WithPorts makes the sampler also read the error counters of the
// InfiniBand/RoCE ports under the sysfs root (e.g. "/") at each stage's
// start and end.
func (s *Sampler) WithPorts(root string) *Sampler {
	s.ports = root
	return s
}

// watchXIDs registers every sampled GPU for NVML's critical XID events
// and records each one, with the stage it arrived in, until Stop.
func (s *Sampler) watchXIDs(lib nvml.Interface) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS || set == nil {
		return
	}
	registered := 0
	for _, g := range s.gpus {
		if g.dev.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
			registered++
		}
	}
	if registered == 0 {
		_ = set.Free() // nothing to wait for; the set is unused
		return
	}
	s.events, s.eventsDone = set, make(chan struct{})
	go func() {
		defer close(s.eventsDone)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			// A bounded wait, so Stop is seen within xidPoll.
			ev, ret := set.Wait(uint32(xidPoll / time.Millisecond))
			if ret != nvml.SUCCESS || ev.EventType&nvml.EventTypeXidCriticalError == 0 {
				continue
			}
			part := CounterPart{GPU: -1, Link: -1}
			for _, g := range s.gpus {
				if g.dev == ev.Device {
					part.GPU, part.BusID = g.index, g.bus
				}
			}
			s.mu.Lock()
			stage := s.stage
			if stage == "" {
				stage = "between stages"
			}
			s.growth = append(s.growth, CounterGrowth{Host: s.host, Stage: stage, Part: part, Counter: CtrXID, After: 1, Detail: fmt.Sprint(ev.EventData)})
			s.mu.Unlock()
		}
	}()
}

// xidPoll bounds each wait for an XID event.
const xidPoll = 100 * time.Millisecond

// readCounters reads every error counter of the sampled GPUs and ports.
func (s *Sampler) readCounters() snapshot {
	snap := snapshot{vals: map[counterKey]uint64{}, bytes: map[CounterPart]uint64{}}
	for _, g := range s.gpus {
		readGPUCounters(&snap, g.index, g.bus, g.dev)
	}
	if s.ports != "" {
		readPortCounters(&snap, s.ports)
	}
	if s.watched == "" {
		s.watched = watchedWords(snap, len(s.gpus), s.events != nil)
	}
	return snap
}

// watchedWords says which counters a reading found: on how many GPUs,
// NVLinks and ports, and their names.
func watchedWords(snap snapshot, gpus int, xids bool) string {
	names := map[string]bool{}
	links, ports := map[CounterPart]bool{}, map[string]bool{}
	for k := range snap.vals {
		names[k.Counter] = true
		switch {
		case k.Part.NIC != "":
			ports[k.Part.NIC] = true
		case k.Part.Link >= 0:
			links[k.Part] = true
		}
	}
	if xids {
		names[CtrXID+" events"] = true
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	slices.Sort(list)
	if len(list) == 0 {
		return fmt.Sprintf("no error counter readable on %d GPU(s)", gpus)
	}
	return fmt.Sprintf("%d GPU(s), %d NVLink(s), %d port(s): %s", gpus, len(links), len(ports), strings.Join(list, ", "))
}

// Watched says which error counters the sampler reads ("" before the first
// stage).
func (s *Sampler) Watched() string {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.watched
}

// closeCounts reads the counters at the end of the stage whose counters
// were read at its start, and keeps what grew (cmu held).
func (s *Sampler) closeCounts() snapshot {
	after := s.readCounters()
	if s.countStage != "" {
		g := grown(s.host, s.countStage, time.Since(s.countT0).Seconds(), s.countBefore, after)
		s.mu.Lock()
		s.growth = append(s.growth, g...)
		s.mu.Unlock()
		s.countStage = ""
	}
	return after
}

func (s *Sampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// Stage says which stage runs from now on ("" none); a stage gets a sample
// at its start.
// The error counters are read at every stage's start and end. Stage is
// called from one goroutine.
func (s *Sampler) Stage(name string) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	var snap snapshot
	counting := len(s.gpus) > 0 || s.ports != ""
	if counting {
		snap = s.closeCounts()
	}
	s.mu.Lock()
	s.stage = name
	s.mu.Unlock()
	if name != "" {
		if counting {
			s.countStage, s.countT0, s.countBefore = name, time.Now(), snap
		}
		s.sample()
	}
}

// sample reads NVML once for every GPU the sampler watches: clocks,
// power, temperature, throttle reasons, utilisation and processes, kept
// per stage.
func (s *Sampler) sample() {
	s.mu.Lock()
	stage := s.stage
	s.mu.Unlock()
	if stage == "" {
		return
	}
	for _, g := range s.gpus {
		sm, ret1 := g.dev.GetClockInfo(nvml.CLOCK_SM)
		power, ret2 := g.dev.GetPowerUsage()
		limit, ret3 := g.dev.GetEnforcedPowerLimit()
		temp, ret4 := g.dev.GetTemperature(nvml.TEMPERATURE_GPU)
		reasons, ret5 := g.dev.GetCurrentClocksEventReasons()
		util, ret6 := g.dev.GetUtilizationRates()
		procs, ret7 := g.dev.GetComputeRunningProcesses()
		s.mu.Lock()
		key := fmt.Sprintf("%s/%d", stage, g.index)
		ss := s.by[key]
		if ss == nil {
			ss = &StageSample{Host: s.host, GPU: g.index, BusID: g.bus, Stage: stage}
			s.by[key] = ss
			s.order = append(s.order, key)
		}
		ss.Samples++
		if ret1 == nvml.SUCCESS {
			if ss.SMClockMinMHz == 0 || int(sm) < ss.SMClockMinMHz {
				ss.SMClockMinMHz = int(sm)
			}
			ss.SMClockMaxMHz = max(ss.SMClockMaxMHz, int(sm))
		}
		if ret2 == nvml.SUCCESS {
			ss.PowerMaxW = max(ss.PowerMaxW, int(power/1000))
		}
		if ret3 == nvml.SUCCESS {
			ss.PowerLimitW = int(limit / 1000)
		}
		if ret4 == nvml.SUCCESS {
			ss.TempMaxC = max(ss.TempMaxC, int(temp))
		}
		if ret5 == nvml.SUCCESS {
			for _, r := range clockReasons {
				if reasons&r.bit != 0 && !slices.Contains(ss.Reasons, r.name) {
					ss.Reasons = append(ss.Reasons, r.name)
				}
			}
		}
		if ret6 == nvml.SUCCESS {
			u := int(util.Gpu)
			if ss.Samples == 1 || u < ss.UtilMinPct {
				ss.UtilMinPct = u
			}
			ss.UtilMaxPct = max(ss.UtilMaxPct, u)
		}
		if ret7 == nvml.SUCCESS {
			for _, p := range procs {
				if !slices.ContainsFunc(ss.Processes, func(q GPUProcess) bool { return q.PID == p.Pid }) {
					ss.Processes = append(ss.Processes, GPUProcess{PID: p.Pid, Name: processName(p.Pid), MemBytes: p.UsedGpuMemory})
				}
			}
		}
		s.mu.Unlock()
	}
}

// Idle samples the GPUs for d while this process runs nothing on them,
// every IdleEvery, as the stage IdleStage: utilisation then is another
// workload's (also one NVML cannot list, in another container).
func (s *Sampler) Idle(d time.Duration) {
	s.mu.Lock()
	s.stage = IdleStage
	s.mu.Unlock()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-s.stop:
			return
		case <-time.After(IdleEvery):
		}
		s.sample()
	}
	s.mu.Lock()
	s.stage = ""
	s.mu.Unlock()
}

// IdleEvery is how often Idle samples.
const IdleEvery = 50 * time.Millisecond

// OnStop sets what runs once when the sampler stops (releasing NVML).
func (s *Sampler) OnStop(f func()) *Sampler {
	s.onStop = f
	return s
}

// Stop ends the sampling (the first call) and returns every stage's
// samples, in the order they began.
func (s *Sampler) Stop() []StageSample {
	s.stopOnce.Do(func() {
		s.cmu.Lock()
		if s.countStage != "" {
			s.closeCounts() // a run that stopped inside a stage: what grew so far
		}
		s.cmu.Unlock()
		close(s.stop)
		<-s.done
		if s.eventsDone != nil {
			<-s.eventsDone
			_ = s.events.Free() // the events are read; nothing depends on the release
		}
		if s.onStop != nil {
			s.onStop()
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StageSample, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, *s.by[k])
	}
	return out
}

// Growth returns the error counters that grew in each stage, and the XID
// events (complete once Stop has run).
func (s *Sampler) Growth() []CounterGrowth {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]CounterGrowth(nil), s.growth...)
	sortGrowth(out)
	return out
}

// SeenWhileMeasured says what the samples of one GPU show that slows it,
// across the stages it ran, with the highest SM clock it may reach: a
// thermal or power throttle, a power cap it ran into, or clocks held
// below their maximum; and, in detail, the figures it saw. It returns ""
// when the samples show nothing.
func SeenWhileMeasured(samples []StageSample, smMaxMHz int) (cause, detail string) {
	if len(samples) == 0 {
		return "", ""
	}
	var reasons []string
	top, power, limit, temp := 0, 0, 0, 0
	for _, s := range samples {
		for _, r := range s.Reasons {
			if !slices.Contains(reasons, r) {
				reasons = append(reasons, r)
			}
		}
		top = max(top, s.SMClockMaxMHz)
		power, limit, temp = max(power, s.PowerMaxW), max(limit, s.PowerLimitW), max(temp, s.TempMaxC)
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if slices.Contains(reasons, n) {
				return true
			}
		}
		return false
	}
	switch {
	case has("hardware thermal slowdown", "software thermal slowdown"):
		cause = "a thermal throttle"
	case has("power brake", "hardware slowdown"):
		cause = "a hardware slowdown (power brake or an external signal)"
	case has("software power cap") && limit > 0 && power*100 >= limit*95:
		cause = fmt.Sprintf("a power cap: it draws all of its %d W limit", limit)
	case smMaxMHz > 0 && top > 0 && top*100 < smMaxMHz*85:
		cause = fmt.Sprintf("clocks locked or reduced below their %d MHz", smMaxMHz)
	case has("application clocks setting"):
		cause = "application clocks set below the maximum"
	default:
		return "", ""
	}
	var parts []string
	if top > 0 {
		parts = append(parts, fmt.Sprintf("SM clock up to %d MHz", top))
	}
	if power > 0 {
		parts = append(parts, fmt.Sprintf("power up to %d W of %d W", power, limit))
	}
	if temp > 0 {
		parts = append(parts, fmt.Sprintf("%d °C", temp))
	}
	if len(reasons) > 0 {
		parts = append(parts, "NVML's reasons: "+strings.Join(reasons, ", "))
	}
	return cause, strings.Join(parts, ", ")
}

// Host is the host the sampler reads.
func (s *Sampler) Host() string { return s.host }
