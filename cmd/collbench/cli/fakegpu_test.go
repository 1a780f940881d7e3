package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/nccl"
	"collbench/backend/nccl/driver"
	"collbench/backend/nccl/fakegpu"
	"collbench/doctor"
	"collbench/engine"
	"collbench/internal/faults"
	"collbench/internal/nvmlmock"
	"collbench/measure"
)

// The commands on the NCCL backend, over a fake HGX H100 (backend/nccl/fakegpu)
// whose NVML (internal/nvmlmock) describes the same GPUs: the path a GPU
// machine takes, flags to exit code, without GPUs. The algorithm probe,
// which starts a process of its own, is off.

// fakeGPUFactory is testFactory with the NCCL backend over a fake HGX H100
// of gpus GPUs with opts.
func fakeGPUFactory(gpus int, opts fakegpu.Options) (*Factory, *bytes.Buffer, *bytes.Buffer) {
	return fakeMachineFactory(fakegpu.HGX("H100", gpus, opts))
}

// fakeMachineFactory is testFactory on the fake machine given.
func fakeMachineFactory(machine *fakegpu.Driver) (*Factory, *bytes.Buffer, *bytes.Buffer) {
	f, out, errOut := testFactory()
	f.NCCL = func(lib string) (measure.Backend, error) {
		return nccl.Open(nccl.Options{Lib: lib, Driver: machine})
	}
	f.NVML = func() nvml.Interface { return machine.Machine().NVML() }
	env := f.Environ()
	f.Environ = func() []string { return append(env, engine.EnvProbe+"=off") }
	return f, out, errOut
}

func TestFakeGPUCollectiveTable(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{})
	if code := run(t, f, "allreduce", "--sizes", "8,4K", "-w", "1", "-n", "3"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"# backend:  nccl (2.28.3; libnccl.so.2; CUDA driver 13.0) [auto; GPUs and NCCL found]",
		"# ranks:    4 on NVIDIA H100 80GB HBM3 [0000:18:00.0, 0000:2a:00.0, 0000:3a:00.0, 0000:5d:00.0]",
		"4 KiB", "# wrong elements:    0 (OK)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestFakeGPUSweepFeatures runs a sweep of every collective with the
// features of NCCL's benchmark that take the backend's other paths
// (groups of ops, blocking, CUDA graphs, registration, cycles) and reads
// every row back verified.
func TestFakeGPUSweepFeatures(t *testing.T) {
	for _, extra := range [][]string{
		{"--agg", "2"}, {"--blocking", "1"}, {"--cuda-graph", "2"}, {"--register", "1"}, {"--register", "2"}, {"--cycles", "2"},
		{"--threads", "one"}, {"--threads", "one", "--agg", "2"}, {"--threads", "one", "--blocking", "1"}, {"--threads", "one", "--cuda-graph", "2"},
		{"--threads", "one", "--register", "2"},
	} {
		t.Run(strings.Join(extra, " "), func(t *testing.T) {
			f, _, errOut := fakeGPUFactory(4, fakegpu.Options{})
			path := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"sweep", "--collectives", "all", "--backend", "nccl", "--sizes", "1K,64K", "-n", "2", "-w", "1", "-q", "-o", path}, extra...)
			if code := run(t, f, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			d := readRows(t, path)
			if len(d.Results) < 2*len(measure.AllCollectives()) {
				t.Fatalf("%d rows", len(d.Results))
			}
			if want := map[bool]string{true: "one", false: "per-gpu"}[slices.Contains(extra, "one")]; d.Config.Threads != want {
				t.Errorf("config threads %q, want %q", d.Config.Threads, want)
			}
			for _, r := range d.Results {
				for _, h := range r.Halves() {
					if h.Wrong == nil || *h.Wrong != 0 {
						t.Errorf("%s %d B: #wrong %v", r.Collective, r.SizeBytes, h.Wrong)
					}
				}
			}
		})
	}
}

func TestFakeGPURunConfigAndVerifyGroups(t *testing.T) {
	f, _, errOut := fakeGPUFactory(4, fakegpu.Options{})
	cfg := filepath.Join(t.TempDir(), "suite.yaml")
	if err := os.WriteFile(cfg, []byte("name: fake\nbackend: nccl\niterations: 2\nwarmup: 1\nsuites:\n  - collectives: [allreduce, alltoall, sendrecv]\n    sizes: \"1K:16K:x4\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(t, f, "run", "--config", cfg, "--quiet", "--output", filepath.Join(t.TempDir(), "out")); code != 0 {
		t.Fatalf("run --config: exit %d: %s", code, errOut)
	}
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{})
	if code := run(t, f, "verify-groups", "--backend", "nccl", "--rank-list", "[[0,1],[2,3]]", "--sizes", "1K"); code != 0 {
		t.Fatalf("verify-groups: exit %d: %s\n%s", code, errOut, out)
	}
	f, out, errOut = fakeGPUFactory(4, fakegpu.Options{})
	if code := run(t, f, "verify-groups", "--backend", "nccl", "--threads", "one", "--rank-list", "[[1,2,3],[0]]", "--sizes", "1K"); code != 0 {
		t.Fatalf("verify-groups --threads one: exit %d: %s\n%s", code, errOut, out)
	}
}

// TestFakeGPUFaults plants faults in the machine and checks what the
// command says and how it exits: a failed call exits 3 naming the rank
// and its GPU, with the rows measured before it kept; a corrupt result
// exits 1 with its wrong elements counted; a machine without GPUs is a
// usage error.
func TestFakeGPUFaults(t *testing.T) {
	for _, dev := range []int{1, 3} {
		f, _, errOut := fakeGPUFactory(4, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclAllReduce", Device: dev, Skip: 30, Code: driver.RemoteError}}})
		path := filepath.Join(t.TempDir(), "r.json")
		code := run(t, f, "allreduce", "--backend", "nccl", "--sizes", "1K,2K,4K,8K", "-n", "5", "-w", "0", "-q", "-o", path)
		bus := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"}[dev]
		msg := strings.TrimSpace(errOut.String())
		if code != 3 || !strings.Contains(msg, "ncclAllReduce: remote process exited") || !strings.Contains(msg, bus) {
			t.Errorf("GPU %d: exit %d, stderr %q", dev, code, msg)
		}
		if d := readRows(t, path); len(d.Results) == 0 || len(d.Results) >= 4 {
			t.Errorf("GPU %d: %d rows kept, want those measured before the fault", dev, len(d.Results))
		}
	}
	f, out, _ := fakeGPUFactory(2, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclBroadcast", Device: 1, Corrupt: true}}})
	if code := run(t, f, "broadcast", "--backend", "nccl", "--sizes", "1K", "-w", "0"); code != 1 || strings.Contains(out.String(), "# wrong elements:    0") {
		t.Errorf("corrupt broadcast: exit %d\n%s", code, out)
	}
	f, _, errOut := fakeGPUFactory(0, fakegpu.Options{})
	if code := run(t, f, "allreduce", "--backend", "nccl", "--sizes", "1K"); code != 2 || !strings.Contains(errOut.String(), "no usable GPU driver: cuInit: CUDA_ERROR_NO_DEVICE") {
		t.Errorf("no GPUs: exit %d, stderr %q", code, errOut)
	}
}

// TestFakeGPUDoctor runs doctor on the fake machine, whose GPUs copy and
// compute at host speed: every one is far below what an H100 should do,
// and doctor fails the host for it, naming the expectation.
func TestFakeGPUDoctor(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{})
	code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "1M", "--copy-size", "1M", "--world-size", "1M", "-n", "3")
	if code != 1 || !strings.Contains(out.String(), "FAIL host testhost: every one of its 4 ranks is slow alone") ||
		!strings.Contains(out.String(), "a healthy one of their model 1491.8") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestFakeGPUDoctorNamesWhatItSawWhileMeasuring runs doctor on hosts whose
// GPUs NVML shows capped, hot or held to low clocks while the stages run:
// the finding names the cause it saw, with the figures.
func TestFakeGPUDoctorNamesWhatItSawWhileMeasuring(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(g *nvmlmock.GPU)
		want string
	}{
		{"power cap", func(g *nvmlmock.GPU) {
			g.PowerLimitW, g.PowerW, g.SMClockMHz, g.ClockReasons = 300, 300, 1200, nvml.ClocksEventReasonSwPowerCap
		}, "GPUs 0, 1: a power cap: it draws all of its 300 W limit (GPU 0 while measured: SM clock up to 1200 MHz, power up to 300 W of 300 W"},
		{"hot", func(g *nvmlmock.GPU) {
			g.TempC, g.SMClockMHz, g.ClockReasons = 91, 1300, nvml.ClocksEventReasonSwThermalSlowdown
		}, "GPUs 0, 1: a thermal throttle (GPU 0 while measured: SM clock up to 1300 MHz, power up to 420 W of 700 W, 91 °C"},
		{"locked clocks", func(g *nvmlmock.GPU) { g.SMClockMHz = 990 }, "GPUs 0, 1: clocks locked or reduced below their 1980 MHz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nvmlmock.HGX("H100")
			m.GPUs = m.GPUs[:2]
			for i := range m.GPUs {
				tc.set(&m.GPUs[i])
			}
			f, out, errOut := fakeMachineFactory(fakegpu.New(m, fakegpu.Options{}))
			code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "1M", "--copy-size", "1M", "--world-size", "1M", "-n", "3")
			if code != 1 || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, want a finding with %q\n%s\n%s", code, tc.want, out, errOut)
			}
		})
	}
}

// TestFakeGPUDoctorConfigExpectations sets, in a doctor config, the
// healthy shares of an H100 to what the fake machine does on this host
// (and no link peak): doctor then holds the GPUs to them and finds the
// machine healthy; a config naming an unknown model is refused.
func TestFakeGPUDoctorConfigExpectations(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "doctor.yaml")
	yaml := "doctor:\n  thresholds:\n    default: {drop: 0.95, peak_fraction: 0}\n  expectations:\n    H100: {copy_share: 0.0001, fill_per_core_cycle: 0.0000001}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f, out, errOut := fakeGPUFactory(2, fakegpu.Options{})
	js := filepath.Join(dir, "d.json")
	code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "1M", "--copy-size", "1M", "--world-size", "1M", "-n", "3", "--config", cfg, "-o", js)
	if code != 0 || !strings.Contains(out.String(), "healthy") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	raw, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	// 5120-bit memory at 2,619 MHz: half of 3,352 GB/s, times 0.0001.
	if !strings.Contains(string(raw), `"copy_expected_gbps": 0.1676`) {
		t.Errorf("the report's expectation is not the config's:\n%s", raw)
	}
	if err := os.WriteFile(cfg, []byte("doctor:\n  expectations:\n    Z80: {copy_share: 0.5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _, errOut = fakeGPUFactory(2, fakegpu.Options{})
	if code := run(t, f, "doctor", "--backend", "nccl", "--config", cfg); code != 2 || !strings.Contains(errOut.String(), `unknown GPU model "Z80"`) ||
		strings.Count(strings.TrimSpace(errOut.String()), "\n") != 0 {
		t.Errorf("unknown model: exit %d, stderr %q", code, errOut)
	}
}

// TestFakeGPUModelDoctor runs doctor on a modeled 8-GPU HGX H100 whose
// work takes the time a healthy one takes: healthy; then with faults
// planted in the model, each named.
func TestFakeGPUModelDoctor(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(m *fakegpu.Model)
		want string
	}{
		{"healthy", func(m *fakegpu.Model) {}, "healthy"},
		{"slow fill", func(m *fakegpu.Model) { m.FillFactor = map[int]float64{3: 0.14} }, "FAIL rank 3"},
		{"slow link", func(m *fakegpu.Model) { m.LinkFactor = map[[2]int]float64{{1, 6}: 0.3} }, "GPU 1 (0000:2a:00.0) ↔ GPU 6 (0000:ba:00.0)"},
		{"slow host", func(m *fakegpu.Model) {
			m.CopyFactor = map[int]float64{0: 0.6, 1: 0.6, 2: 0.6, 3: 0.6, 4: 0.6, 5: 0.6, 6: 0.6, 7: 0.6}
		}, "FAIL host"},
	} {
		if testing.Short() && tc.name != "healthy" {
			continue // make test: the engine's accuracy harness plants each once
		}
		t.Run(tc.name, func(t *testing.T) {
			m := fakegpu.HealthyModel(1)
			tc.set(m)
			f, out, errOut := fakeGPUFactory(8, fakegpu.Options{Model: m})
			code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "256K", "--copy-size", "256K", "--world-size", "256K", "--latency-size", "4K")
			if want := map[bool]int{true: 0, false: 1}[tc.want == "healthy"]; code != want || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, want %d and %q\n%s\n%s", code, want, tc.want, out, errOut)
			}
		})
	}
}

// TestFakeGPUHangNamesTheStuckGPU plants a call that never returns on one
// GPU, at several GPUs and places of the sweep (the first timed operation,
// a check, an exchange, a group of a split world), in both issuing modes.
// With a thread per GPU the watchdog names that GPU alone and the others
// as waiting for it; with one thread issuing for all, it names every GPU
// that thread issues for, and says so. Either way the rows measured
// before the hang are kept.
func TestFakeGPUHangNamesTheStuckGPU(t *testing.T) {
	bus := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"}
	cases := []struct {
		name string
		call string
		dev  int
		skip int
		args []string
		rows bool     // rows are measured before the hang
		gang []int    // with --threads one: the GPUs named together
		also []string // more words of the verdict
	}{
		{"first timed op", "ncclAllReduce", 1, 0, []string{"allreduce", "--sizes", "1K,2K"}, false, []int{0, 1, 2, 3}, []string{"allreduce float sum 1K out-of-place"}},
		{"a check", "ncclAllReduce", 2, 30, []string{"allreduce", "--sizes", "1K,2K,4K,8K"}, true, []int{0, 1, 2, 3}, []string{"the check of allreduce"}},
		{"an exchange", "ncclSend", 3, 40, []string{"alltoallv", "--sizes", "1K,2K,4K,8K"}, true, []int{0, 1, 2, 3}, []string{"alltoallv"}},
		{"a group of a split world", "ncclAllReduce", 3, 30, []string{"allreduce", "--rank-list", "[[0,2],[1,3]]", "--sizes", "1K,2K,4K,8K"}, true, []int{1, 3}, nil},
	}
	for _, c := range cases {
		for _, mode := range []string{"per-gpu", "one"} {
			t.Run(c.name+" "+mode, func(t *testing.T) {
				t.Parallel() // a machine of its own; the watchdog waits out --timeout
				f, _, errOut := fakeGPUFactory(4, fakegpu.Options{Faults: []fakegpu.Fault{{Call: c.call, Device: c.dev, Skip: c.skip, Hang: true}}})
				path := filepath.Join(t.TempDir(), "r.json")
				args := append(append([]string{}, c.args...), "--backend", "nccl", "--threads", mode, "-n", "5", "-w", "0", "-q", "-o", path, "--timeout", "1s")
				code := run(t, f, args...)
				msg := strings.TrimSpace(errOut.String())
				if code != engine.ExitHung || strings.Count(msg, "\n") > 0 {
					t.Fatalf("exit %d, want %d and one line:\n%s", code, engine.ExitHung, msg)
				}
				stuck := []int{c.dev}
				if mode == "one" {
					stuck = c.gang
				}
				for _, w := range c.also {
					if !strings.Contains(msg, w) {
						t.Errorf("verdict lacks %q: %s", w, msg)
					}
				}
				// The stuck GPUs are named before "not finished", the others
				// only as waiting.
				head, _, ok := strings.Cut(msg, "not finished")
				if !ok {
					t.Fatalf("no verdict: %s", msg)
				}
				for g, b := range bus {
					if named := strings.Contains(head, b); named != slices.Contains(stuck, g) {
						t.Errorf("GPU %d (%s) named as stuck: %v, want %v: %s", g, b, named, !named, msg)
					}
				}
				if one := strings.Contains(msg, "one thread"); one != (mode == "one") {
					t.Errorf("the verdict says one thread issues: %v: %s", one, msg)
				}
				if d := readRows(t, path); (len(d.Results) > 0) != c.rows {
					t.Errorf("%d rows kept, want rows: %v", len(d.Results), c.rows)
				}
			})
		}
	}
}

// TestFakeGPUPlantedHang plants $COLLBENCH_FAULTS hangs in the NCCL
// backend (a rank whose thread never issues its Nth operation) at several
// ranks, in both issuing modes and in a group of a split world: the
// watchdog names that rank's GPU alone, every thread returns (the peers'
// GPUs wait inside NCCL until the communicators are aborted), the planted
// fault is announced, and the rows before the hang are kept.
func TestFakeGPUPlantedHang(t *testing.T) {
	t.Parallel() // machines of their own; the watchdog mostly waits
	bus := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"}
	for _, c := range []struct {
		rank  int
		at    int
		extra []string
	}{
		{0, 1, nil},
		{3, 30, nil},
		{1, 30, []string{"--threads", "one"}},
		{2, 20, []string{"--threads", "one", "--rank-list", "[[0,2],[1,3]]"}},
		{2, 20, []string{"--collectives", "alltoallv,allreduce"}},
	} {
		name := fmt.Sprintf("hang:%d@%d %s", c.rank, c.at, strings.Join(c.extra, " "))
		t.Run(name, func(t *testing.T) {
			f, _, errOut := fakeGPUFactory(4, fakegpu.Options{})
			env := f.Environ()
			f.Environ = func() []string { return append(env, fmt.Sprintf("%s=hang:%d@%d", faults.EnvFaults, c.rank, c.at)) }
			path := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"sweep", "--backend", "nccl", "--sizes", "1K,2K,4K,8K", "-n", "5", "-w", "0", "-q", "-o", path, "--timeout", "1s"}, c.extra...)
			code := run(t, f, args...)
			msg := errOut.String()
			if code != engine.ExitHung || !strings.Contains(msg, "planted faults") {
				t.Fatalf("exit %d, want %d:\n%s", code, engine.ExitHung, msg)
			}
			if testing.Verbose() {
				t.Log(msg)
			}
			verdict := msg[strings.Index(msg, "watchdog:"):]
			head, _, _ := strings.Cut(verdict, "not finished")
			for g, b := range bus {
				if named := strings.Contains(head, b); named != (g == c.rank) {
					t.Errorf("GPU %d named as stuck: %v: %s", g, named, verdict)
				}
			}
			if d := readRows(t, path); (len(d.Results) > 0) != (c.at > 1) {
				t.Errorf("%d rows kept", len(d.Results))
			}
		})
	}
}

// TestFakeGPUDoctorPlantedHang: doctor on the NCCL backend with a rank
// whose thread stops issuing, in different stages: the run still writes
// its report, whose hung-rank finding names that rank's GPU.
func TestFakeGPUDoctorPlantedHang(t *testing.T) {
	t.Parallel() // machines of their own; the watchdog mostly waits
	bus := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"}
	for _, c := range []struct{ rank, at int }{{2, 60}, {1, 5}, {3, 80}} {
		t.Run(fmt.Sprintf("hang:%d@%d", c.rank, c.at), func(t *testing.T) {
			f, _, errOut := fakeGPUFactory(4, fakegpu.Options{})
			env := f.Environ()
			f.Environ = func() []string { return append(env, fmt.Sprintf("%s=hang:%d@%d", faults.EnvFaults, c.rank, c.at)) }
			path := filepath.Join(t.TempDir(), "d.json")
			code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "1M", "--copy-size", "1M", "--world-size", "1M", "-n", "3",
				"-o", path, "--timeout", "1s")
			if code != engine.ExitHung {
				t.Fatalf("exit %d, want %d: %s", code, engine.ExitHung, errOut)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Findings []struct{ Kind, Part, Stage, Msg string }
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatalf("the report is not valid: %v", err)
			}
			found := false
			for _, fd := range rep.Findings {
				if fd.Kind == "hung-rank" {
					found = strings.Contains(fd.Part, fmt.Sprintf("rank %d (", c.rank)) && strings.Contains(fd.Part, bus[c.rank])
					t.Logf("%s: %s", fd.Part, fd.Msg)
					if !found {
						t.Errorf("hung-rank finding names %q", fd.Part)
					}
				}
			}
			if !found {
				t.Errorf("no hung-rank finding for rank %d: %s", c.rank, b)
			}
		})
	}
}

// TestFakeGPUDoctorSharedGPU runs doctor on a modeled 8-GPU host where
// another workload shares GPUs, at several places: time-sliced (each of
// doctor's kernels runs at full speed inside its own slice, a loop of them
// gets half the GPU), listed by NVML with its pid, or busy while NVML
// lists nothing (another container). Slowed, it is a FAIL naming the
// workload; with figures that held, a WARN; never healthy and silent.
func TestFakeGPUDoctorSharedGPU(t *testing.T) {
	foreign := []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 2568 << 20}}
	for _, tc := range []struct {
		name   string
		gpus   []int   // where the workload runs
		share  float64 // of the GPU doctor gets (1: no slowdown)
		listed bool    // NVML lists its process
		busy   uint32  // utilisation while doctor idles
		code   int
		want   []string
		short  bool // run in make test too
	}{
		{"time-sliced on GPU 2, listed", []int{2}, 0.5, true, 100, 1,
			[]string{"FAIL rank 2 (", "gives its user only 5", "another workload runs on it: pid 4242", "2568 MiB of its memory"}, false},
		{"time-sliced on GPUs 0 and 5, listed", []int{0, 5}, 0.4, true, 100, 1,
			[]string{"FAIL rank 0 (", "FAIL rank 5 (", "pid 4242"}, false},
		{"time-sliced on every GPU", []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.5, true, 100, 1,
			[]string{"FAIL rank 0 (", "FAIL rank 7 (", "pid 4242"}, false},
		{"listed, no slowdown", []int{6}, 1, true, 0, 0,
			[]string{"WARN rank 6 (", "measured while shared: another workload runs on it: pid 4242", "its figures held"}, true},
		{"time-sliced on GPU 3, unlisted", []int{3}, 0.5, false, 97, 1,
			[]string{"FAIL rank 3 (", "one NVML does not list", "at least 97% busy while doctor ran nothing"}, false},
		{"unlisted and busy, no slowdown", []int{1}, 1, false, 90, 0,
			[]string{"WARN rank 1 (", "at least 90% busy"}, true},
	} {
		if testing.Short() && !tc.short {
			continue // make test: the WARNs (the engine's accuracy harness plants a time-sliced GPU); make test-long: every place
		}
		t.Run(tc.name, func(t *testing.T) {
			m := fakegpu.HealthyModel(1)
			m.SliceUS = 4
			hw := nvmlmock.HGX("H100")
			for _, g := range tc.gpus {
				if tc.share < 1 {
					if m.Shared == nil {
						m.Shared = map[int]float64{}
					}
					m.Shared[g] = tc.share
				}
				if tc.listed {
					hw.GPUs[g].Processes = foreign
				}
				hw.GPUs[g].UtilPct = tc.busy
			}
			f, out, errOut := fakeMachineFactory(fakegpu.New(hw, fakegpu.Options{Model: m}))
			code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "256K", "--copy-size", "256K", "--world-size", "256K", "--latency-size", "4K")
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s\n%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the report lacks %q:\n%s", w, out)
				}
			}
			// Only the GPUs shared are named.
			for g := 0; g < 8; g++ {
				if !slices.Contains(tc.gpus, g) && strings.Contains(out.String(), fmt.Sprintf("rank %d (", g)) {
					t.Errorf("rank %d is named, but nothing shares its GPU:\n%s", g, out)
				}
			}
		})
	}
}

// TestFakeGPUDoctorBoundsASlowPath: on a modeled host whose every GPU pair
// runs at 1% of its NVLinks' rate (as GPU pairs over NCCL's socket
// transport do), doctor cuts its timed iterations once one operation says
// a measurement would pass its bound, says so, and still names the host's
// pairs. A healthy host never reaches the bound.
func TestFakeGPUDoctorBoundsASlowPath(t *testing.T) {
	defer func(b time.Duration) { doctor.MeasureBudget = b }(doctor.MeasureBudget)
	doctor.MeasureBudget = time.Millisecond
	for _, slow := range []bool{false, true} {
		m := fakegpu.HealthyModel(1)
		if slow {
			m.LinkFactor = map[[2]int]float64{}
			for a := 0; a < 4; a++ {
				for b := a + 1; b < 4; b++ {
					m.LinkFactor[[2]int{a, b}] = 0.01
				}
			}
		}
		f, out, errOut := fakeGPUFactory(4, fakegpu.Options{Model: m})
		code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "256K", "--copy-size", "256K", "--world-size", "256K", "--latency-size", "4K")
		cut := strings.Contains(out.String(), "timed iterations instead of 10, to stay within 1ms each")
		switch {
		case !slow && (code != 0 || cut):
			t.Errorf("healthy: exit %d, iterations cut %v\n%s\n%s", code, cut, out, errOut)
		case slow && (code != 1 || !cut || !strings.Contains(out.String(), "every one of its 6 GPU pairs is slow")):
			t.Errorf("slow pairs: exit %d, iterations cut %v\n%s\n%s", code, cut, out, errOut)
		}
	}
}

// TestFakeGPUModelDoctorNamesALateRank plants a rank whose host issues
// every operation late (late-rank): the modelled GPU waits for its host,
// as a real one does, so the rank's copy is slow alone while its fill
// kernel is not, and doctor names that rank and no other (on 4× H100 the
// same plant was named 10 of 10 times: docs/doctor.md), at two places.
func TestFakeGPUModelDoctorNamesALateRank(t *testing.T) {
	for _, late := range []int{2, 0} {
		if testing.Short() && late == 0 {
			continue
		}
		f, out, errOut := fakeGPUFactory(4, fakegpu.Options{Model: fakegpu.HealthyModel(1)})
		env := f.Environ
		f.Environ = func() []string { return append(env(), fmt.Sprintf("%s=late-rank:%d:2ms", faults.EnvFaults, late)) }
		code := run(t, f, "doctor", "--backend", "nccl", "--quick", "--bw-size", "256K", "--copy-size", "256K", "--world-size", "256K", "--latency-size", "4K")
		text := out.String()
		if code != 1 || !strings.Contains(text, fmt.Sprintf("FAIL rank %d (testhost", late)) || !strings.Contains(text, "its host issuing the work late") ||
			strings.Count(text, "\nFAIL ") != 1 {
			t.Errorf("late rank %d: exit %d\n%s\n%s", late, code, text, errOut)
		}
	}
}
