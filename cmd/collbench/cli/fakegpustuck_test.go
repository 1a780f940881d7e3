package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"collbench/internal/faults"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/nccl"
	"collbench/backend/nccl/fakegpu"
	"collbench/engine"
	"collbench/measure"
)

// Runs that NCCL holds: a call that never returns, an abort that never
// returns, a proxy thread stuck on a recorded operation's events. Each is
// planted on the fake machine; collbench must end every one of them within
// its bound, with the rows measured on disk.

// childFakeMachine is the fake machine a child process of this test binary
// runs on (CB_CLI_FAKE_GPU), nil for the real system.
func childFakeMachine(spec string) *fakegpu.Driver {
	switch spec {
	case "stuck-call-and-abort":
		// GPU 2's 40th ncclAllReduce never returns, and neither does any
		// ncclCommAbort: nothing inside the library can release it.
		return fakegpu.HGX("H100", 4, fakegpu.Options{Timeout: 10 * time.Minute, Faults: []fakegpu.Fault{
			{Call: "ncclAllReduce", Device: 2, Skip: 40, Hang: true},
			{Call: "ncclCommAbort", Device: -1, Hang: true},
		}})
	}
	return nil
}

// childFactory is the factory of a child on machine m: its real streams.
func childFactory(m *fakegpu.Driver) *Factory {
	f := NewFactory(SystemIO())
	f.NCCL = func(lib string) (measure.Backend, error) {
		return nccl.Open(nccl.Options{Lib: lib, Driver: m})
	}
	f.NVML = func() nvml.Interface { return m.Machine().NVML() }
	env := f.Environ
	f.Environ = func() []string { return append(env(), engine.EnvProbe+"=off") }
	return f
}

// TestFakeGPUSignalEndsAStuckRun: a run whose NCCL call never returns, on
// a machine whose ncclCommAbort never returns either, gets SIGTERM or
// SIGINT. The process is gone within 5 s of the signal, with the exit code
// of the signal, a line naming the stuck GPU, and its -o file holding the
// rows measured before and why the run ended.
func TestFakeGPUSignalEndsAStuckRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, engine.ExitTerminated}, {syscall.SIGINT, engine.ExitInterrupted}}
	if testing.Short() {
		cases = cases[:1] // make test; make test-long sends both
	}
	for _, c := range cases {
		out := filepath.Join(t.TempDir(), "r.json")
		p := startSelf(t, []string{"CB_CLI_FAKE_GPU=stuck-call-and-abort"}, "allreduce", "--backend", "nccl", "--sizes", "1K:1M",
			"-n", "5", "-w", "0", "--timeout", "0", "-q", "-o", out)
		rows := waitRows(t, p, out, 1)
		// The rows stop coming once GPU 2's thread is stuck.
		for quiet := time.Now(); time.Since(quiet) < time.Second; time.Sleep(50 * time.Millisecond) {
			if n := len(readRows(t, out).Results); n != rows {
				rows, quiet = n, time.Now()
			}
		}
		_ = p.cmd.Process.Signal(c.sig)
		sent := time.Now()
		code := p.wait(t, 30*time.Second)
		if took := p.ended.Sub(sent); took > 5*time.Second {
			t.Errorf("%v: exited %v after the signal (want within 5 s)", c.sig, took)
		}
		errs := p.errb.String()
		if code != c.code || !strings.Contains(errs, "did not stop within") || !strings.Contains(errs, "0000:3a:00.0") {
			t.Errorf("%v: exit %d (want %d), stderr:\n%s", c.sig, code, c.code, errs)
		}
		d := readRows(t, out)
		if len(d.Results) != rows || !strings.Contains(d.Error, "did not stop within") {
			t.Errorf("%v: %d rows in the file (want %d), error %q", c.sig, len(d.Results), rows, d.Error)
		}
	}
}

// TestFakeGPUProfilerStallNeverHoldsTheRun plays NCCL 2.28.3's stall: a
// recorded exchange with every peer above a size leaves NCCL's proxy
// thread stuck on its kernel events, and ncclCommDestroy then waits for it
// for ever. The run notes it, records no more, aborts the communicators
// instead of destroying them, and ends at once with every row verified,
// in both issuing modes, with the stall at its first and at a later row.
func TestFakeGPUProfilerStallNeverHoldsTheRun(t *testing.T) {
	for _, c := range []struct {
		threads string
		stall   int64
		sizes   string
	}{{"per-gpu", 8 << 10, "1K,64K,256K"}, {"one", 8 << 10, "1K,64K,256K"}, {"per-gpu", 1, "1K,4K"}} {
		t.Run(c.threads+" "+c.sizes, func(t *testing.T) {
			f, _, errOut := fakeGPUFactory(4, fakegpu.Options{ProfilerStall: c.stall, Timeout: 2 * time.Minute})
			path := filepath.Join(t.TempDir(), "r.json")
			start := time.Now()
			code := run(t, f, "sweep", "--collectives", "alltoall,allreduce", "--backend", "nccl", "--threads", c.threads,
				"--sizes", c.sizes, "-n", "2", "-w", "1", "-q", "-o", path)
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("took %v: something waited for the stuck proxy", took)
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			d := readRows(t, path)
			if want := 2 * len(strings.Split(c.sizes, ",")); len(d.Results) != want {
				t.Fatalf("%d rows, want %d", len(d.Results), want)
			}
			for _, r := range d.Results {
				if r.OutOfPlace == nil || r.OutOfPlace.Wrong == nil || *r.OutOfPlace.Wrong != 0 {
					t.Errorf("%s %d B not verified: %+v", r.Collective, r.SizeBytes, r.OutOfPlace)
				}
			}
			if !strings.Contains(strings.Join(d.Notes, "\n"), "never ended the events of a recorded operation") {
				t.Errorf("no note of the stall: %q", d.Notes)
			}
		})
	}
}

// TestFakeGPULateKernelOnAlignedClocks runs 4 fake GPUs whose timers are
// tens of ms apart, as real ones are. A clean run has no rank late in
// every row beyond the host's own scheduling (the fake's ranks are
// goroutines on a loaded machine: up to 31.8 ms seen in one row); a rank planted to issue 40 ms late
// (late-rank) is named in every row, at several ranks, and so is its late
// call of the operation on the host's clock. (With one thread
// issuing for every GPU, a late share delays every GPU's kernel alike:
// that mode is run clean only.)
func TestFakeGPULateKernelOnAlignedClocks(t *testing.T) {
	offsets := []int64{0, 99_808_000, 17_089_000, 55_000_000}
	// The host may hold a rank's goroutine for ms on a loaded 2-core
	// machine under -race (2.7 ms seen, then 11.9 ms in make test, which
	// failed a clean run at a line of 10 ms): half the planted 40 ms is
	// the line.
	const planted = 40 * time.Millisecond
	const jitter = float64(planted/2) / float64(time.Microsecond) // us
	for _, c := range []struct {
		late    int // -1: none
		threads string
	}{{-1, "per-gpu"}, {-1, "one"}, {1, "per-gpu"}, {3, "per-gpu"}, {0, "per-gpu"}} {
		t.Run(fmt.Sprintf("late %d %s", c.late, c.threads), func(t *testing.T) {
			f, out, errOut := fakeGPUFactory(4, fakegpu.Options{ClockOffsets: offsets})
			if c.late >= 0 {
				env := f.Environ
				f.Environ = func() []string {
					return append(env(), fmt.Sprintf("%s=late-rank:%d:%v", faults.EnvFaults, c.late, planted))
				}
			}
			path := filepath.Join(t.TempDir(), "r.json")
			if code := run(t, f, "allreduce", "--backend", "nccl", "--threads", c.threads, "--sizes", "1K:16K", "-n", "2", "-w", "1", "-o", path); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			d := readRows(t, path)
			// A loaded 2-core host holds any rank's goroutine now and then
			// (31.8 ms seen under make test beside other work): a clean
			// run fails only where one rank is beyond the line in every
			// row, as a planted one is, and a planted run needs its rank
			// latest and beyond the line in every row, whatever noise does
			// to the others in one.
			called, lateAt := map[int]int{}, map[int]int{}
			for _, r := range d.Results {
				k := r.OutOfPlace.Kernels
				if k == nil || len(k.ClockErrorUS) != 4 {
					t.Fatalf("%d B: kernels %+v, want starts aligned for 4 ranks", r.SizeBytes, k)
				}
				at, most := 0, 0.0
				for i, s := range k.StartUS {
					if s > most {
						at, most = i, s
					}
				}
				// The calls, on the host's clock alone: the planted rank
				// called late, a clean run's ranks together.
				if len(k.EnqueueUS) != 4 {
					t.Fatalf("%d B: calls %v, want one per rank", r.SizeBytes, k.EnqueueUS)
				}
				for i, e := range k.EnqueueUS {
					if e > jitter {
						called[i]++
					}
				}
				if c.late >= 0 && (k.EnqueueUS[c.late] <= jitter || slices.Max(k.EnqueueUS) != k.EnqueueUS[c.late]) {
					t.Errorf("%d B: calls %v us after the first; planted: rank %d, %v late", r.SizeBytes, k.EnqueueUS, c.late, planted)
				}
				if most > k.ClockErrorUS[at]+slices.Max(k.ClockErrorUS)+jitter {
					lateAt[at]++
				}
			}
			for i, n := range called {
				if i != c.late && n == len(d.Results) {
					t.Errorf("rank %d called beyond %v us after the first in every row (planted: %d)", i, jitter, c.late)
				}
			}
			for i, n := range lateAt {
				if i != c.late && n == len(d.Results) {
					t.Errorf("rank %d started beyond the errors and %v us in every row (planted: %d)", i, jitter, c.late)
				}
			}
			late := lateAt[c.late]
			line := ""
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, "# late kernel:") {
					line = l
				}
			}
			want := fmt.Sprintf("rank %d started last in %d of %d", c.late, len(d.Results), len(d.Results))
			switch {
			case c.late >= 0 && (late != len(d.Results) || !strings.Contains(line, want)):
				t.Errorf("rank %d planted late: named in %d of %d rows; %q", c.late, late, len(d.Results), line)
			}
		})
	}
}

// TestFakeGPUMoreRanksThanGPUs: --ranks above the GPUs this process sees
// is a usage error of one line, before NCCL starts anything.
func TestFakeGPUMoreRanksThanGPUs(t *testing.T) {
	m := fakegpu.HGX("H100", 4, fakegpu.Options{})
	f, _, errOut := fakeMachineFactory(m)
	code := run(t, f, "allreduce", "--backend", "nccl", "-g", "5", "--sizes", "8")
	msg := strings.TrimSpace(errOut.String())
	if code != engine.ExitUsage || strings.Contains(msg, "\n") || !strings.Contains(msg, "--ranks 5") || !strings.Contains(msg, "4 GPU(s)") {
		t.Fatalf("exit %d, want %d and one line naming the limit: %s", code, engine.ExitUsage, msg)
	}
	if n := len(m.Issuers()); n != 0 || m.ProfiledOps() > 0 {
		t.Errorf("NCCL was started: %d issuing GPUs, %d profiled operations", n, m.ProfiledOps())
	}
}

// TestFakeGPUVerifyGroupsThatStopsSaysSo: a layout whose communicators
// never form (GPU 3's second ncclCommSplit hangs) stops verify-groups by
// the watchdog; the summary says which check did not finish, not that
// values did not match (every value checked did).
func TestFakeGPUVerifyGroupsThatStopsSaysSo(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclCommSplit", Device: 3, Skip: 1, Hang: true}}})
	code := run(t, f, "verify-groups", "--backend", "nccl", "--sizes", "1K", "--timeout", "1s")
	if code != engine.ExitHung {
		t.Fatalf("exit %d, want %d: %s", code, engine.ExitHung, errOut)
	}
	want := "# FAIL: not every layout was checked: layout uneven stopped at forming its communicators; " +
		"3 layouts not started (reversed, interleaved, singletons): watchdog: "
	if s := out.String(); strings.Contains(s, "some values did not match") || !strings.Contains(s, want) ||
		!strings.Contains(s, "not finished setting up the communicators of layout uneven after 1s") {
		t.Errorf("summary:\n%s\nwant a line with %q", s, want)
	}
}

// TestFakeGPUVerifyGroupsLongerThanTheTimeout: verify-groups reports its
// progress to the watchdog at every step, so a run that lasts several
// times --timeout, with every step well inside it, is not taken for a
// hang. (Before, nothing it ran was on the board: the watchdog fired once
// the whole run passed --timeout.) Rank 2 waits 10 ms before each
// operation it issues.
func TestFakeGPUVerifyGroupsLongerThanTheTimeout(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{})
	env := f.Environ
	f.Environ = func() []string { return append(env(), faults.EnvFaults+"=late-rank:2:10ms") }
	start := time.Now()
	code := run(t, f, "verify-groups", "--backend", "nccl", "--sizes", "1K", "--timeout", "1s", "--rank-list", "[[0,2],[1,3]]")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d after %v: %s\n%s", code, took, errOut, out)
	}
	if took < 2*time.Second {
		t.Errorf("the run took %v: the test needs one of at least twice the 1s timeout", took)
	}
	if s := out.String(); !strings.Contains(s, "# PASS: every value matched") {
		t.Errorf("summary:\n%s", s)
	}
}

// waitHolding waits, at most 30 s, until process pid has path open.
func waitHolding(t *testing.T, pid int, path string) {
	t.Helper()
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ents, _ := os.ReadDir(fds)
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && l == path {
				return
			}
		}
	}
	t.Fatalf("process %d did not open %s in 30 s", pid, path)
}

// waitBlockedIn waits, at most 30 s, until a thread of process pid sleeps
// in the kernel function fn (its wchan). Where the kernel does not say
// (wchan reads "0" or cannot be read), it waits 3 s instead.
func waitBlockedIn(t *testing.T, pid int, fn string) {
	t.Helper()
	told := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
		for _, w := range tasks {
			b, err := os.ReadFile(w) //nolint:gosec // a path under /proc built from the child's pid
			if err == nil && string(b) != "0" && string(b) != "" {
				told = true
			}
			if string(b) == fn {
				return
			}
		}
		if !told && len(tasks) > 0 && time.Until(deadline) < 27*time.Second {
			t.Logf("the kernel does not say where process %d sleeps: waited 3 s", pid)
			return
		}
	}
	t.Fatalf("no thread of process %d slept in %s within 30 s", pid, fn)
}

// TestSignalEndsACommandBlockedOnARead: a file named to any command that
// is a named pipe nobody writes blocks in the kernel's open, and one whose
// writer never writes, in a read; the first SIGINT ends either at once
// (not by the signal's grace), exit 130, in one line naming the file.
func TestSignalEndsACommandBlockedOnARead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	f, _, errOut := testFactory()
	if code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "1K", "-n", "1", "-w", "0", "-q", "-o", a); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Every flag that reads a file a user names, as one class: results,
	// a suite, a cluster model, GPU facts, an NCCL log, a doctor report.
	for _, c := range []struct {
		name, want string
		writer     bool
		args       []string
	}{
		{"no writer", "stopped while waiting to open", false, []string{"compare", a}},
		{"a silent writer", "stopped while reading", true, []string{"compare", a}},
		{"suite", "stopped while waiting to open", false, []string{"run", "--config"}},
		{"silent suite", "stopped while reading", true, []string{"run", "--config"}},
		{"cluster", "stopped while waiting to open", false, []string{"doctor", "--simulate"}},
		{"facts", "stopped while waiting to open", false, []string{"topo", "--facts"}},
		{"nccl log", "stopped while waiting to open", false, []string{"topo", "--no-nccl=false", "--nccl-log"}},
		{"doctor config", "stopped while waiting to open", false, []string{"doctor", "--backend", "cpu", "-g", "2", "--config"}},
		{"report", "stopped while waiting to open", false, []string{"report", "-o", filepath.Join(dir, "r.html")}},
	} {
		fifo := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if c.writer {
			go func() {
				if fh, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					t.Cleanup(func() { fh.Close() })
				}
			}()
		}
		p := startSelf(t, nil, append(append([]string{}, c.args...), fifo)...)
		// The signal goes once the child is where the case wants it: a
		// fixed wait let a loaded host's child get SIGINT before it
		// watched for signals (killed by it, exit 130, nothing said).
		if c.writer {
			// Open, the child has still to return from the call and
			// start its read.
			waitHolding(t, p.cmd.Process.Pid, fifo)
			time.Sleep(200 * time.Millisecond)
		} else {
			waitBlockedIn(t, p.cmd.Process.Pid, "wait_for_partner")
		}
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		sent := time.Now()
		code := p.wait(t, 30*time.Second)
		if took := p.ended.Sub(sent); took >= engine.SignalGrace {
			t.Errorf("%s: exited %v after SIGINT, by the signal's grace", c.name, took)
		}
		if msg := strings.TrimSpace(p.errb.String()); code != engine.ExitInterrupted || strings.Count(msg, "\n") > 0 || !strings.Contains(msg, c.want+" "+fifo) {
			t.Errorf("%s: exit %d, stderr %q", c.name, code, msg)
		}
	}
}
