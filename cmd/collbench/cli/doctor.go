package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"collbench/bootstrap"
	"collbench/doctor"
	"collbench/engine"
	"collbench/internal/outfile"
	"collbench/runconfig"
	"collbench/suites"
	"collbench/topology"
	"collbench/watchdog"
)

// DoctorOptions are the flags of `collbench doctor`.
type DoctorOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	Quick   bool
	Format  string
	Output  string
	Prom    string
	HTML    string
	Config  string
	Backend string
	NCCLLib string
	Ranks   int
	Quiet   bool

	BWSize, LatSize, CopySize, WorldSize string
	Iters                                int

	engine.RunFlags
}

// NewCmdDoctor builds `collbench doctor`.
func NewCmdDoctor(f *Factory, runF func(*DoctorOptions) error) *cobra.Command {
	o := &DoctorOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Find the bad GPU, link, NIC or host and name it",
		Long: `doctor runs the search cluster engineers do by hand, on the ranks it has (one
process with every local GPU, or one process per GPU under any launcher), with
no relaunch:

  1. health facts, no traffic: PCIe links below their maximum, NVLinks down or
     with errors, ECC and memory repair, clock slowdowns, hosts whose GPU count,
     driver or NCCL differ, InfiniBand/RoCE ports down or slow, GPUs far from a NIC
  2. each GPU alone, all at once: a device-to-device copy and a compute probe
  3. every GPU pair of a host, in rounds of disjoint pairs: one way and both ways
  4. across hosts: host pairs, per rail and whole-host allreduce; suspects are
     paired again with healthy hosts (a constant number of rounds)
  5. the whole world: allreduce against the expectation, bisected when it falls
     short and nothing above explains it
  6. every value of every stage checked: wrong data names the rank that sent it

A figure is a finding when it is far below its peers of the same link class or
below a fraction of what the topology promises; suspects are measured again
before they are named. The verdict comes first, then the evidence.

Exit 0: healthy. 1: findings. 2: bad input. 3: the run failed. 4: a rank hung.`,
		Args:    noArgs,
		Example: "  collbench doctor --quick\n  collbench doctor --prom /var/lib/node_exporter/collbench.prom\n  srun -N 4 --ntasks-per-node 8 collbench doctor -o doctor.json",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return doctorRun(o)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.Quick, "quick", false, "health facts and one round of each stage (node admission)")
	fs.StringVar(&o.Format, "format", "table", "stdout: table or json")
	fs.StringVarP(&o.Output, "output", "o", "", "also write the report as JSON to FILE")
	fs.StringVar(&o.Prom, "prom", "", "also write the verdict and figures for node-exporter's textfile collector to FILE")
	fs.StringVar(&o.HTML, "html", "", "also write an HTML report with a heat map of the pairs to FILE")
	fs.StringVar(&o.Config, "config", "", "a YAML file whose doctor: section sets thresholds by hardware class")
	fs.StringVar(&o.Backend, "backend", "auto", "auto, cpu or nccl")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load")
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no stage progress on stderr")
	fs.StringVar(&o.BWSize, "bw-size", "", "message size of the bandwidth tests (default 256M on GPUs, 1M on the cpu backend)")
	fs.StringVar(&o.LatSize, "latency-size", "4K", "message size of the latency test")
	fs.StringVar(&o.CopySize, "copy-size", "", "bytes each GPU copies alone (default 256M on GPUs, 4M on the cpu backend)")
	fs.StringVar(&o.WorldSize, "world-size", "", "message size of the whole-world allreduce (default 1G on GPUs, 4M on the cpu backend)")
	fs.IntVarP(&o.Iters, "iters", "n", 0, "timed iterations per test; the best one counts (default 10 on GPUs, 15 on the cpu backend)")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks", "iters")
	return cmd
}

// sizeFlag parses a size flag, or returns def when it is empty.
func sizeFlag(name, v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	s, err := suites.ParseSize(v)
	if err != nil {
		return 0, engine.UsageErrorf("invalid --%s: %v", name, err)
	}
	return s, nil
}

func doctorRun(o *DoctorOptions) error {
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Format != "table" && o.Format != "json" {
		return engine.UsageErrorf("unknown --format %q for doctor (valid: table, json)", o.Format)
	}
	if o.Iters < 0 {
		return engine.UsageErrorf("invalid --iters %d: must be at least 1", o.Iters)
	}
	var th *doctor.Thresholds
	if o.Config != "" {
		cfg, err := runconfig.Load(o.Config)
		if err != nil {
			return &engine.UsageError{Err: err}
		}
		if cfg.Doctor != nil {
			th = cfg.Doctor.Thresholds
		}
	}
	targets := map[string]*outfile.Target{}
	for _, out := range []struct{ flag, path string }{{"--output", o.Output}, {"--prom", o.Prom}, {"--html", o.HTML}} {
		if out.path != "" {
			t, err := outputTarget(out.flag, out.path)
			if err != nil {
				return err
			}
			targets[out.flag] = t
		}
	}
	f := o.Factory
	// NCCL's own log says which transport it used between each pair; send
	// it to a file of ours unless the user collects it already.
	logDir := ""
	if o.Backend != "cpu" && f.Getenv("NCCL_DEBUG") == "" && f.Getenv("NCCL_DEBUG_FILE") == "" && f.HardExit {
		if dir, release, err := tempDir("collbench-doctor-"); err == nil {
			logDir = dir
			defer release()
			os.Setenv("NCCL_DEBUG", "INFO")
			os.Setenv("NCCL_DEBUG_SUBSYS", "INIT,P2P,NET")
			os.Setenv("NCCL_DEBUG_FILE", filepath.Join(dir, "nccl.%h.%p.log"))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	board := watchdog.NewBoard()
	ctx = watchdog.WithBoard(ctx, board)
	ss, err := f.StartSession(ctx, o.Backend, o.NCCLLib, o.Ranks, o.RunFlags, nil)
	if err != nil {
		return err
	}
	defer ss.Close()
	b, pw := ss.Choice.Backend, ss.PW
	gpu := b.Name() == "nccl"
	def := func(g, c int64) int64 {
		if gpu {
			return g
		}
		return c
	}
	opts := doctor.Options{Quick: o.Quick, Backend: b.Name(), Hosts: ss.Hosts, Board: board}
	if opts.BWSize, err = sizeFlag("bw-size", o.BWSize, def(256<<20, 1<<20)); err != nil {
		return err
	}
	if opts.LatSize, err = sizeFlag("latency-size", o.LatSize, 4<<10); err != nil {
		return err
	}
	if opts.CopySize, err = sizeFlag("copy-size", o.CopySize, def(256<<20, 4<<20)); err != nil {
		return err
	}
	if opts.WorldSize, err = sizeFlag("world-size", o.WorldSize, def(1<<30, 4<<20)); err != nil {
		return err
	}
	opts.Iters, opts.Warmup = int(def(10, 15)), int(def(2, 1))
	if o.Iters > 0 {
		opts.Iters = o.Iters
	}
	opts.Thresholds = doctor.Thresholds{Default: doctor.DefaultRules}
	if !gpu {
		opts.Thresholds.Default = doctor.CPURules
	}
	if th != nil {
		if th.Default != (doctor.Rules{}) {
			opts.Thresholds.Default = th.Default
		}
		opts.Thresholds.Class = th.Class
	}
	if ss.Choice.Auto && pw.Rank0() && !o.Quiet {
		fmt.Fprintf(o.IO.ErrOut, "collbench: backend %s (%s)\n", b.Name(), ss.Choice.Reason)
	}
	world, err := f.OpenWorld(ctx, b, pw, ss.N, o.Device)
	if err != nil {
		return err
	}
	defer world.Close()
	devices, err := engine.WorldDevices(world)
	if err != nil {
		return &engine.RunError{Err: err}
	}
	opts.Devices = devices
	opts.Who = engine.Namer(ss, devices)
	g := f.StartGuard(ctx, cancel, ss, world, board, o.Timeout, devices)
	defer g.Close()
	if gpu {
		if opts.Facts, err = f.gatherFacts(world, b.Info().Version); err != nil {
			return &engine.RunError{Err: err}
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
	opts.BeforeVerdict = func() error {
		var err error
		transports, err = gatherTransports(world, logDir, local, ss.Hosts)
		return err
	}
	opts.Transport = func(a, b int) string { return transports[fmt.Sprintf("%d-%d", a, b)] }
	if pw.Rank0() && !o.Quiet {
		opts.Progress = func(s string) { fmt.Fprintf(o.IO.ErrOut, "collbench doctor: %s\n", s) }
	}
	rep, runErr := doctor.Run(ctx, world, opts)
	if runErr != nil {
		runErr = g.Cause(runErr, 0)
		if pw.Multi() && !engine.IsFault(runErr) {
			pw.Ctl.Abort(runErr)
		}
		if !engine.IsFault(runErr) {
			runErr = &engine.RunError{Err: runErr}
		}
		// A run that ends on a fault still writes its verdict: the part at
		// fault, the stages that finished and what they found, and a
		// Prometheus file that says unhealthy.
		if rep == nil || !pw.Rank0() {
			return runErr
		}
		rep.AddFault(faultFinding(runErr, opts.Who))
	}
	if !pw.Rank0() {
		return nil
	}
	if !gpu {
		rep.Notes = append(rep.Notes, "health facts skipped: the cpu backend has no GPUs to ask NVML about")
	}
	for _, w := range []struct {
		flag  string
		write func(io.Writer) error
	}{{"--output", rep.WriteJSON}, {"--prom", rep.WriteProm}, {"--html", rep.WriteHTML}} {
		if t := targets[w.flag]; t != nil {
			if err := writeTarget(o.IO.Out, t, true, w.write); err != nil {
				return err
			}
		}
	}
	if o.Format == "json" {
		err = rep.WriteJSON(o.IO.Out)
	} else {
		err = rep.WriteText(o.IO.Out)
	}
	if err != nil {
		return &engine.RunError{Err: err}
	}
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
		return &engine.CheckFailedError{Msg: fmt.Sprintf("doctor: %d finding(s); the verdict is above", n)}
	}
	return nil
}

// faultFinding is the finding for a fault that ended a doctor run, naming
// the rank at fault where one is.
func faultFinding(err error, who func(int) string) doctor.Finding {
	f := doctor.Finding{Severity: "FAIL", Stage: "run", Kind: "run-failed", Part: "the run", Msg: err.Error(),
		Cause: "the run failed before the verdict; the stages that finished are below"}
	var pe *bootstrap.PeerError
	var se *engine.SignalError
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
func (f *Factory) hostFacts(ncclVersion string) doctor.HostFacts {
	hf := doctor.HostFacts{Host: f.HostIdentity(), NCCL: ncclVersion}
	lib := f.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		hf.Unavailable = append(hf.Unavailable, fmt.Sprintf("NVML: %v", ret))
		return hf
	}
	defer lib.Shutdown()
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
	for _, g := range t.GPUs {
		hf.LinkGBps = append(hf.LinkGBps, g.LinkGBps)
	}
	return hf
}

// gatherFacts collects every host's facts on rank 0 (one per host).
func (f *Factory) gatherFacts(w suites.World, ncclVersion string) ([]doctor.HostFacts, error) {
	mine := f.hostFacts(ncclVersion)
	d, ok := w.(suites.Distributed)
	if !ok || d.Control() == nil {
		return []doctor.HostFacts{mine}, nil
	}
	b, _ := json.Marshal(mine)
	parts, err := d.Control().Gather(b)
	if err != nil {
		return nil, fmt.Errorf("gathering health facts: %w", err)
	}
	var out []doctor.HostFacts
	seen := map[string]bool{}
	for _, p := range parts {
		var hf doctor.HostFacts
		if json.Unmarshal(p, &hf) == nil && !seen[hf.Host] {
			seen[hf.Host] = true
			out = append(out, hf)
		}
	}
	return out, nil
}

// ncclChannel matches NCCL's connection lines, e.g.
// "host:12:34 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read".
var ncclChannel = regexp.MustCompile(`\[(\d+)\] NCCL INFO Channel \d+(?:/\d+)? : \d+\[([0-9a-fx]+)\] -> \d+\[([0-9a-fx]+)\](?: \[(?:send|receive)\])? via (\S+)`)

// gatherTransports reads this process's NCCL log and returns, on rank 0,
// the transport between world ranks "a-b" (a < b) of the same host.
func gatherTransports(w suites.World, dir string, local map[int]int, hosts []string) (map[string]string, error) {
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
	all := []report{mine}
	if d, ok := w.(suites.Distributed); ok && d.Control() != nil {
		b, _ := json.Marshal(mine)
		parts, err := d.Control().Gather(b)
		if err != nil {
			return nil, err
		}
		all = nil
		for _, p := range parts {
			var rp report
			if json.Unmarshal(p, &rp) == nil {
				all = append(all, rp)
			}
		}
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
