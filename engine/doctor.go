package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/bootstrap"
	"collbench/doctor"
	"collbench/internal/tempdir"
	"collbench/measure"
	"collbench/topology"
)

// Doctor is one doctor run: where (backend, ranks), how (quick or full,
// the sizes, iterations and thresholds), and what to tell the caller.
type Doctor struct {
	Backend, NCCLLib string
	Ranks            int
	// Knobs are the mode, sizes and iterations; a size or count left 0
	// takes the backend's default (doctor.DefaultKnobs).
	doctor.Knobs
	Thresholds *doctor.Thresholds
	// Expectations replace, by GPU model, the healthy shares of GPUs alone.
	Expectations doctor.Expectations
	// Counters are the rules for error counters that grow during the run.
	Counters doctor.CounterThresholds
	RunFlags
	// OnReady, if set, runs once the backend is chosen, before any rank is
	// opened; rank0 says whether this process writes the report.
	OnReady func(choice BackendChoice, rank0 bool) error
	// Progress, if set, receives each step's line (rank 0 only).
	Progress func(string)
	// OnReport, if set, receives rank 0's report and the error the run
	// ends with (DoctorVerdict) before the session closes, so the verdict
	// is written while the process surely lives; an error it returns (the
	// verdict could not be written) is the one RunDoctor returns.
	OnReport func(rep *doctor.Report, err error) error
	// Cluster, where set, is a cluster file: doctor runs on its model in
	// this process (doctor.Simulate) instead of on the world.
	Cluster string
	// History is a directory that keeps each node's figures run after run:
	// rank 0 checks it before any traffic and records the verdict in it
	// before OnReport; HistoryRules are its rules (LoadConfig sets them),
	// OnHistory receives the records written, Tool the version they name.
	History      string
	HistoryRules doctor.HistoryRules
	OnHistory    func(paths []string)
	Tool         string
}

// RunDoctor runs d and returns the report on rank 0 (nil elsewhere). A run
// that ends on a fault still returns the report, with the fault as its
// first finding, beside the fault's error; an unhealthy verdict is a
// *CheckFailedError.
func (f *System) RunDoctor(ctx context.Context, d Doctor) (_ *doctor.Report, err error) {
	if d.Cluster != "" {
		return f.simulateDoctor(ctx, d)
	}
	start := time.Now()
	// NCCL's own log says which transport it used between each pair; send
	// it to a file of ours unless the user collects it already.
	logDir := ""
	if !doctor.HostMemory(d.Backend) && f.Getenv("NCCL_DEBUG") == "" && f.Getenv("NCCL_DEBUG_FILE") == "" && f.OwnsProcess {
		if dir, release, err := tempdir.Make("collbench-doctor-"); err == nil {
			logDir = dir
			defer release()
			os.Setenv("NCCL_DEBUG", "INFO")
			os.Setenv("NCCL_DEBUG_SUBSYS", "INIT,P2P,NET")
			os.Setenv("NCCL_DEBUG_FILE", filepath.Join(dir, "nccl.%h.%p.log"))
		}
	}
	gr, err := f.begin(ctx, d.Backend, d.NCCLLib, d.Ranks, d.RunFlags, nil)
	if err != nil {
		return nil, err
	}
	defer func() { gr.end(err) }()
	ctx, ss, board := gr.Ctx, gr.SS, gr.Board
	b, pw := ss.Choice.Backend, ss.PW
	gpu := b.Name() == "nccl"
	opts := doctor.Options{Knobs: d.Or(doctor.DefaultKnobs(!gpu)), Backend: b.Name(), Hosts: ss.Hosts, Board: board}
	opts.Expectations, opts.Counters = d.Expectations, d.Counters
	opts.Thresholds = doctor.ThresholdsOr(d.Thresholds, doctor.RulesFor(b.Name()))
	if d.OnReady != nil {
		if err := d.OnReady(ss.Choice, pw.Rank0()); err != nil {
			return nil, err
		}
	}
	// The history is rank 0's: checked before any traffic, so a directory
	// it cannot keep costs no run.
	if pw.Rank0() {
		if err := d.checkHistory(); err != nil {
			return nil, err
		}
	}
	if err := f.open(gr, d.RunFlags); err != nil {
		return nil, err
	}
	world, devices := gr.World, gr.Devices
	opts.Devices = devices
	opts.Who = Namer(ss, devices)
	if gpu {
		if opts.Facts, err = f.gatherFacts(world, b.Info().Version); err != nil {
			return nil, &RunError{Err: err}
		}
	}
	if doctor.HostMemory(b.Name()) {
		if opts.Machines, err = f.gatherMachines(world); err != nil {
			return nil, &RunError{Err: err}
		}
	}
	// Which device each local rank drives, for the transports in NCCL's log.
	local := map[int]int{}
	for _, r := range world.Ranks() {
		local[r.WorldRank()] = r.WorldRank()
	}
	if pw.Multi() {
		if dev, derr := strconv.Atoi(f.Getenv("COLLBENCH_DEVICE")); derr == nil {
			for r := range local {
				local[r] = dev
			}
		}
	}
	var transports map[string]string
	var sampler *doctor.Sampler
	var samples []doctor.StageSample
	var growth []doctor.CounterGrowth
	var watched []string
	if gpu {
		sampler = f.startSampler(world, ss.Hosts)
		defer sampler.Stop()
		// Every process idles alike (they left the facts' exchange
		// together), so no GPU of the world runs doctor's work meanwhile.
		sampler.Idle(IdleWindow)
		opts.Stage = sampler.Stage
		opts.Samples = func() []doctor.StageSample { return samples }
		opts.Growth = func() []doctor.CounterGrowth { return growth }
		opts.Watched = func() []string { return watched }
	}
	opts.BeforeVerdict = func() error {
		var err error
		if transports, err = gatherTransports(world, logDir, local, ss.Hosts); err != nil {
			return err
		}
		if sampler != nil {
			samples, growth, watched, err = gatherSamples(world, sampler)
		}
		return err
	}
	opts.Transport = func(a, b int) string { return transports[fmt.Sprintf("%d-%d", a, b)] }
	if pw.Rank0() {
		opts.Progress = d.Progress
	}
	rep, runErr := doctor.Run(ctx, world, opts)
	if rep != nil {
		// The whole run, from the command's start: the session, NCCL's
		// start and the facts included; the stages have their own times.
		rep.Seconds = time.Since(start).Seconds()
	}
	if runErr = classify(gr.settle(runErr, 0)); runErr != nil {
		// A run that ends on a fault still writes its verdict: the part at
		// fault, the stages that finished and what they found, and a
		// Prometheus file that says unhealthy.
		if rep == nil || !pw.Rank0() {
			return nil, runErr
		}
		rep.AddFault(faultFinding(runErr, opts.Who))
	}
	if !pw.Rank0() {
		return nil, nil
	}
	if !gpu {
		rep.Notes = append(rep.Notes, "health facts skipped: the "+b.Name()+" backend runs on host memory, with no GPUs to ask NVML about")
	}
	// Delivered before the session closes: after a fault, ending MPI or the
	// control connection waits on the processes that failed, and a
	// launcher may kill this one meanwhile.
	return rep, f.deliverDoctor(d, rep, DoctorVerdict(rep, runErr))
}

// DoctorVerdict is the error a doctor run ends with: the fault that ended
// it, a check failed for a report with findings, or nil when healthy.
func DoctorVerdict(rep *doctor.Report, runErr error) error {
	if runErr != nil {
		return runErr
	}
	if !rep.Healthy {
		n := 0
		for _, f := range rep.Findings {
			if f.Severity == "FAIL" {
				n++
			}
		}
		return &CheckFailedError{Msg: fmt.Sprintf("doctor: %d finding(s); the verdict is above", n)}
	}
	return nil
}

// faultFinding is the finding for a fault that ended a doctor run, naming
// the rank at fault where one is.
func faultFinding(err error, who func(int) string) doctor.Finding {
	f := doctor.Finding{Severity: "FAIL", Stage: "run", Kind: "run-failed", Part: "the run", Msg: err.Error(),
		Cause: "the run failed before the verdict; the stages that finished are below"}
	var pe *bootstrap.PeerError
	var se *SignalError
	switch {
	case errors.As(err, &pe):
		if pe.Rank >= 0 {
			f.Part, f.Ranks, f.Host = who(pe.Rank), []int{pe.Rank}, pe.Host
		}
		switch pe.Kind {
		case bootstrap.FaultHung:
			f.Kind, f.Cause = "hung-rank", "an operation on this rank made no progress within --timeout: its GPU, its process, or a link it waits on"
		case bootstrap.FaultSilent:
			f.Kind, f.Cause = "silent-rank", "its process stopped answering heartbeats: stopped, frozen, or its host cut off"
		case bootstrap.FaultDisconnected:
			f.Kind, f.Cause = "lost-rank", "its process exited or was killed, or its host or network failed"
		case bootstrap.FaultFailed:
			f.Kind, f.Cause = "failed-rank", "its process reported the error above"
		case bootstrap.FaultInterrupted:
			f.Severity, f.Kind, f.Cause = "WARN", "interrupted", "the run was stopped before the verdict; nothing is known of the stages that did not run"
		}
	case errors.As(err, &se):
		f.Severity, f.Kind, f.Msg = "WARN", "interrupted", "the run was "+strings.SplitN(se.Error(), ";", 2)[0]+" before the verdict"
		f.Cause = "nothing is known of the stages that did not run"
	}
	return f
}

// hostFacts reads this host's health facts: NVML's view of every GPU, the
// link matrix and NVLink speeds, and the NICs from sysfs.
func (f *System) hostFacts(ncclVersion string) doctor.HostFacts {
	hf := doctor.HostFacts{Host: f.HostIdentity(), NCCL: ncclVersion, Ours: []uint32{uint32(os.Getpid())}} //nolint:gosec // G115: a pid
	for _, kv := range f.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case !strings.HasPrefix(k, "NCCL_"), k == "NCCL_HOSTID", strings.HasPrefix(k, "NCCL_DEBUG"):
			// not NCCL's, or naming this host or a log: alike on no two hosts
		default:
			if hf.NCCLEnv == nil {
				hf.NCCLEnv = map[string]string{}
			}
			hf.NCCLEnv[k] = v
		}
	}
	lib := f.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		hf.Unavailable = append(hf.Unavailable, fmt.Sprintf("NVML: %v", ret))
		return hf
	}
	defer func() { _ = lib.Shutdown() }() // the facts are read; nothing depends on the shutdown
	hf.GPUs, hf.Driver, hf.Unavailable = doctor.ReadGPUHealth(lib)
	in := topology.Inputs{Host: hf.Host}
	if facts, err := topology.FromNVML(lib); err == nil {
		in.Facts = &facts
	}
	if st, err := os.Stat("/sys/class"); err == nil && st.IsDir() {
		in.Sysfs = &topology.Sysfs{Root: "/"}
	}
	t := topology.Build(in)
	hf.Matrix, hf.NICs = t.Matrix, t.NICs
	if in.Sysfs != nil {
		var buses []string
		rdma := false
		for _, g := range hf.GPUs {
			buses = append(buses, g.BusID)
		}
		for _, n := range t.NICs {
			if n.BusID != "" {
				buses = append(buses, n.BusID)
			}
			rdma = rdma || n.Kind == "infiniband" || n.Kind == "roce"
		}
		hf.PCI = in.Sysfs.PCIPolicy(buses, rdma)
	}
	for _, g := range t.GPUs {
		hf.LinkGBps = append(hf.LinkGBps, g.LinkGBps)
	}
	return hf
}

// gatherFacts collects every host's facts on rank 0 (one per host).
func (f *System) gatherFacts(w measure.World, ncclVersion string) ([]doctor.HostFacts, error) {
	all, err := gatherJSON(w, f.hostFacts(ncclVersion))
	if err != nil {
		return nil, fmt.Errorf("gathering health facts: %w", err)
	}
	var out []doctor.HostFacts
	seen := map[string]int{}
	for _, hf := range all {
		if i, ok := seen[hf.Host]; ok {
			out[i].Ours = append(out[i].Ours, hf.Ours...) // every process of the world on that host
			continue
		}
		seen[hf.Host] = len(out)
		out = append(out, hf)
	}
	return out, nil
}

// gatherMachines collects on rank 0 the boot id of each host's machine
// (doctor.Options.Machines): ranks of simulated hosts on one machine
// share its cores.
func (f *System) gatherMachines(w measure.World) (map[string]string, error) {
	type onHost struct{ Host, Machine string }
	all, err := gatherJSON(w, onHost{f.HostIdentity(), topology.MachineID()})
	if err != nil {
		return nil, fmt.Errorf("gathering the hosts' machines: %w", err)
	}
	out := map[string]string{}
	for _, m := range all {
		if _, ok := out[m.Host]; !ok {
			out[m.Host] = m.Machine
		}
	}
	return out, nil
}

// samplePeriod is how often doctor reads the clocks, power, temperature
// and clock event reasons of the GPUs while a stage runs.
const samplePeriod = 200 * time.Millisecond

// IdleWindow is how long doctor samples the GPUs before its first stage,
// running nothing on them: a GPU busy all along is busy with another
// workload, one NVML may not list.
var IdleWindow = 500 * time.Millisecond

// startSampler samples this process's GPUs while doctor's stages run.
func (f *System) startSampler(w measure.World, hosts []string) *doctor.Sampler {
	var buses []string
	for _, r := range w.Ranks() {
		if b := r.Device().BusID; b != "" {
			buses = append(buses, b)
		}
	}
	lib := f.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return doctor.NewSampler(nil, f.HostIdentity(), nil, samplePeriod) // samples nothing: the report's facts say NVML is missing
	}
	s := doctor.NewSampler(lib, f.HostIdentity(), buses, samplePeriod)
	// One process per host reads its InfiniBand/RoCE ports: the first
	// local rank's.
	if st, err := os.Stat("/sys/class/infiniband"); err == nil && st.IsDir() && firstOnHost(w, hosts) {
		s.WithPorts("/")
	}
	return s.OnStop(func() { _ = lib.Shutdown() }) // the samples are read; nothing depends on the shutdown
}

// firstOnHost says whether this process drives the lowest world rank of
// its host (hosts: each world rank's host).
func firstOnHost(w measure.World, hosts []string) bool {
	rs := w.Ranks()
	if len(rs) == 0 {
		return false
	}
	me := rs[0].WorldRank()
	for r := 0; r < me && me < len(hosts); r++ {
		if hosts[r] == hosts[me] {
			return false
		}
	}
	return true
}

// gatherSamples stops this process's sampler and collects every process's
// samples and counter growth on rank 0.
func gatherSamples(w measure.World, s *doctor.Sampler) ([]doctor.StageSample, []doctor.CounterGrowth, []string, error) {
	type both struct {
		Samples []doctor.StageSample   `json:"s"`
		Growth  []doctor.CounterGrowth `json:"g"`
		Host    string                 `json:"h"`
		Watched string                 `json:"w"`
	}
	mine := both{Samples: s.Stop(), Host: s.Host()}
	mine.Growth, mine.Watched = s.Growth(), s.Watched()
	all, err := gatherJSON(w, mine)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gathering the GPUs' samples: %w", err)
	}
	var out []doctor.StageSample
	var growth []doctor.CounterGrowth
	// What each host's processes could read, hosts alike in one line.
	hostsOf := map[string][]string{}
	var order []string
	for _, some := range all {
		out = append(out, some.Samples...)
		growth = append(growth, some.Growth...)
		if some.Watched == "" {
			continue
		}
		if _, ok := hostsOf[some.Watched]; !ok {
			order = append(order, some.Watched)
		}
		if hs := hostsOf[some.Watched]; !slices.Contains(hs, some.Host) {
			hostsOf[some.Watched] = append(hs, some.Host)
		}
	}
	var watched []string
	for _, w := range order {
		hs := hostsOf[w]
		who := strings.Join(hs, ", ")
		if len(hs) > 3 {
			who = fmt.Sprintf("%s and %d more host(s)", strings.Join(hs[:3], ", "), len(hs)-3)
		}
		watched = append(watched, who+": "+w)
	}
	return out, growth, watched, nil
}

// gatherJSON collects every process's value on rank 0, in rank order (a
// value that does not decode is left out); in one process, its own.
func gatherJSON[T any](w measure.World, mine T) ([]T, error) {
	d, ok := w.(measure.Distributed)
	if !ok || d.Control() == nil {
		return []T{mine}, nil
	}
	b, _ := json.Marshal(mine)
	parts, err := d.Control().Gather(b)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, p := range parts {
		var v T
		if json.Unmarshal(p, &v) == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// ncclChannel matches NCCL's connection lines, e.g.
// "host:12:34 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read".
var ncclChannel = regexp.MustCompile(`\[(\d+)\] NCCL INFO Channel \d+(?:/\d+)? : \d+\[([0-9a-fx]+)\] -> \d+\[([0-9a-fx]+)\](?: \[(?:send|receive)\])? via (\S+)`)

// gatherTransports reads this process's NCCL log and returns, on rank 0,
// the transport between world ranks "a-b" (a < b) of the same host.
func gatherTransports(w measure.World, dir string, local map[int]int, hosts []string) (map[string]string, error) {
	type conn struct {
		Host string `json:"h"`
		A    int    `json:"a"` // device indices
		B    int    `json:"b"`
		Via  string `json:"v"`
	}
	type report struct {
		Conns []conn      `json:"c"`
		Devs  map[int]int `json:"d"` // world rank -> device it drives
	}
	hostOfDev := map[int]string{}
	for r, dev := range local {
		if r < len(hosts) {
			hostOfDev[dev] = hosts[r]
		}
	}
	mine := report{Devs: local}
	if dir != "" {
		files, _ := filepath.Glob(filepath.Join(dir, "nccl.*.log"))
		for _, file := range files {
			fh, err := os.Open(file)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				m := ncclChannel.FindStringSubmatch(sc.Text())
				if m == nil {
					continue
				}
				self, _ := strconv.Atoi(m[1])
				a, errA := strconv.Atoi(m[2])
				b, errB := strconv.Atoi(m[3])
				if errA != nil || errB != nil || a == b {
					continue // an older NCCL prints bus ids here
				}
				mine.Conns = append(mine.Conns, conn{Host: hostOfDev[self], A: a, B: b, Via: m[4]})
			}
			fh.Close()
		}
	}
	all, err := gatherJSON(w, mine)
	if err != nil {
		return nil, err
	}
	devOf := map[int]int{}
	via := map[string]string{}
	for _, rp := range all {
		for r, dev := range rp.Devs {
			devOf[r] = dev
		}
		for _, c := range rp.Conns {
			via[fmt.Sprintf("%s|%d|%d", c.Host, min(c.A, c.B), max(c.A, c.B))] = c.Via
		}
	}
	out := map[string]string{}
	for a := range hosts {
		for b := a + 1; b < len(hosts); b++ {
			da, oka := devOf[a]
			db, okb := devOf[b]
			if hosts[a] != hosts[b] || !oka || !okb {
				continue
			}
			if v, ok := via[fmt.Sprintf("%s|%d|%d", hosts[a], min(da, db), max(da, db))]; ok {
				out[fmt.Sprintf("%d-%d", a, b)] = strings.TrimSpace(v)
			}
		}
	}
	return out, nil
}
