package cli

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"collbench/backend/cpu"
	"collbench/engine"
	"collbench/internal/faults"
	"collbench/results"
)

// The tests in this file plant the faults collbench must survive in real
// processes of this test binary (acting as collbench) and watch each being
// handled: a stopped rank, a collective that never returns, a killed rank,
// a killed rank 0, a killed launcher, a run killed while writing results,
// and signals at a large size.

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is collbench (this test binary) running as a child process.
type proc struct {
	cmd     *exec.Cmd
	out     *lockedBuffer
	errb    *lockedBuffer
	done    chan struct{}
	code    int
	started time.Time
	ended   time.Time
	// tmp is the process's TMPDIR, the test's own: what a killed process
	// leaves there is removed with the test.
	tmp string
}

// startSelf starts `collbench ARGS` with extra environment, in a fresh
// environment marker so stray processes of this test can be found, and
// with a temporary directory of the test's own.
func startSelf(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CB_CLI_CHILD=1", "CB_FAULT_TEST="+t.Name(), "TMPDIR="+tmp)
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan struct{}), tmp: tmp}
	cmd.Stdout, cmd.Stderr = p.out, p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.started = time.Now()
	go func() {
		err := cmd.Wait()
		p.ended = time.Now()
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		killStrays(t.Name())
	})
	return p
}

// wait returns the exit code, failing the test after timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		t.Fatalf("still running after %v\nstdout:\n%s\nstderr:\n%s", timeout, p.out, p.errb)
	}
	return -1
}

// procsOf lists live processes whose environment carries the marker of
// this test, with their COLLBENCH_RANK (-1 when none).
func procsOf(testName string) map[int]int {
	out := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("\x00CB_FAULT_TEST="+testName+"\x00")) && !bytes.HasPrefix(env, []byte("CB_FAULT_TEST="+testName+"\x00")) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue // a zombie is dead, only not yet reaped
			}
		}
		rank := -1
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("COLLBENCH_RANK=")); ok {
				rank, _ = strconv.Atoi(string(v))
			}
		}
		out[pid] = rank
	}
	return out
}

func killStrays(testName string) {
	for pid := range procsOf(testName) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// rankPID waits for the process of a rank of this test to exist.
func rankPID(t *testing.T, rank int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for pid, r := range procsOf(t.Name()) {
			if r == rank {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("rank %d never started", rank)
	return 0
}

// noneLeft checks that no process of this test is left within a few seconds.
func noneLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := procsOf(t.Name())
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %v (pid: rank)", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readRows reads a results file; it must always be a valid document.
func readRows(t *testing.T, path string) *results.Document {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	d, err := results.Read(fh)
	if err != nil {
		t.Fatalf("%s is not a valid result document: %v", path, err)
	}
	return d
}

// waitRows waits until path holds at least n rows.
func waitRows(t *testing.T, p *proc, path string, n int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			if d := readRows(t, path); len(d.Results) >= n {
				return len(d.Results)
			}
		}
		select {
		case <-p.done:
			t.Fatalf("ended before %d rows (exit %d): %s", n, p.code, p.errb)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no %d rows in %s after 60 s", n, path)
	return 0
}

// A slow sweep across 4 processes: rows keep coming for a long time.
func slowSweep(out string, extra ...string) []string {
	args := []string{"launch", "-n", "4", "--", "allreduce", "--backend", "cpu", "--sizes", "64K:4M:+64K", "-n", "100", "-w", "1", "-o", out}
	return append(args, extra...)
}

func TestFaultStoppedRankIsNamed(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.json")
	const timeout = 6 * time.Second
	p := startSelf(t, nil, slowSweep(out, "--timeout", timeout.String(), "--heartbeat-timeout", "3s")...)
	before := waitRows(t, p, out, 2)
	pid := rankPID(t, 2)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	code := p.wait(t, timeout+30*time.Second)
	took := p.ended.Sub(stopped)
	errs := p.errb.String()
	if code != engine.ExitHung {
		t.Errorf("exit %d, want %d", code, engine.ExitHung)
	}
	for _, want := range []string{fmt.Sprintf("rank 2 (%s, pid %d) stopped answering", hostname(), pid), "the cause", fmt.Sprintf("collbench launch: rank 2 (pid %d) was stopped by launch", pid)} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if took > timeout+10*time.Second {
		t.Errorf("the run ended %v after the stop (bound: timeout + 10 s)", took)
	}
	if d := readRows(t, out); len(d.Results) < before || d.Error == "" {
		t.Errorf("rows lost: %d after, %d before; error %q", len(d.Results), before, d.Error)
	}
	noneLeft(t)
	t.Logf("stopped rank named and run ended %v after SIGSTOP", took.Round(100*time.Millisecond))
}

func TestFaultHungCollectiveIsNamed(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.json")
	const timeout = 3 * time.Second
	p := startSelf(t, []string{faults.EnvFaults + "=hang:2@400"}, slowSweep(out, "--timeout", timeout.String())...)
	code := p.wait(t, 90*time.Second)
	errs := p.errb.String()
	if code != engine.ExitHung {
		t.Errorf("exit %d, want %d\n%s", code, engine.ExitHung, errs)
	}
	for _, want := range []string{fmt.Sprintf("watchdog: rank 2 (%s, pid", hostname()), "has not finished", "allreduce float sum",
		"ranks 0, 1, 3 are waiting for it", "the cause: watchdog: rank 2"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	d := readRows(t, out)
	if len(d.Results) == 0 || !strings.Contains(d.Error, "watchdog") {
		t.Errorf("rows or the verdict lost: %d rows, error %q", len(d.Results), d.Error)
	}
	noneLeft(t)
}

// TestFaultHungCollectiveInOneProcess plants a collective that never
// returns on one of four ranks of one process: the watchdog names it and
// the others as waiting, aborts the world and keeps the rows.
func TestFaultHungCollectiveInOneProcess(t *testing.T) {
	t.Parallel()
	fs, err := faults.Parse("hang:1@60")
	if err != nil {
		t.Fatal(err)
	}
	f, out, errOut := testFactory()
	f.CPUOptions = cpu.Options{Faults: fs}
	start := time.Now()
	code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "1K:64K", "-n", "10", "-w", "1", "--format", "json", "--timeout", "2s")
	if code != engine.ExitHung {
		t.Fatalf("exit %d, want %d: %s", code, engine.ExitHung, errOut)
	}
	msg := errOut.String()
	for _, want := range []string{"watchdog: rank 1 (testhost) has not finished", "allreduce float sum", "ranks 0, 2, 3 are waiting for it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q: %s", want, msg)
		}
	}
	d, err := results.Read(out)
	if err != nil || len(d.Results) == 0 {
		t.Fatalf("rows measured before the hang are lost: %v", err)
	}
	if took := time.Since(start); took > 12*time.Second {
		t.Errorf("took %v with a 2 s timeout", took)
	}
}

func TestFaultKilledRankIsNamed(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.json")
	p := startSelf(t, nil, slowSweep(out)...)
	before := waitRows(t, p, out, 2)
	pid := rankPID(t, 2)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	code := p.wait(t, 30*time.Second)
	errs := p.errb.String()
	if code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d (the cause was killed by SIGKILL)", code, 128+int(syscall.SIGKILL))
	}
	for _, want := range []string{fmt.Sprintf("the cause: rank 2 (%s, pid %d) disconnected", hostname(), pid),
		fmt.Sprintf("rank 2 (pid %d) was killed by signal KILL", pid), "ranks 0, 1, 3 then exited with code 3"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "rank 0 (") && strings.Contains(errs, "failed: ") {
		t.Errorf("a survivor is blamed:\n%s", errs)
	}
	if d := readRows(t, out); len(d.Results) < before {
		t.Errorf("rows lost: %d after, %d before", len(d.Results), before)
	}
	noneLeft(t)
}

func TestFaultKilledRankZero(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.json")
	p := startSelf(t, nil, slowSweep(out)...)
	before := waitRows(t, p, out, 3)
	pid := rankPID(t, 0)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	code := p.wait(t, 30*time.Second)
	errs := p.errb.String()
	if code != 128+int(syscall.SIGKILL) || !strings.Contains(errs, fmt.Sprintf("rank 0 (%s, pid %d) disconnected", hostname(), pid)) {
		t.Errorf("exit %d\n%s", code, errs)
	}
	if d := readRows(t, out); len(d.Results) < before {
		t.Errorf("rows lost: %d after, %d before", len(d.Results), before)
	}
	noneLeft(t)
}

func TestFaultKilledLauncherTakesItsRanks(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.json")
	p := startSelf(t, nil, slowSweep(out)...)
	waitRows(t, p, out, 1)
	if n := len(procsOf(t.Name())); n != 5 {
		t.Fatalf("want the launcher and 4 ranks, found %d processes", n)
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	noneLeft(t)
	readRows(t, out)
}

// TestFaultKilledRunAlwaysLeavesAValidFile kills a run writing -o at
// random moments: the file is always a valid document, either the one it
// replaced (before the first row) or the new one with every row measured.
func TestFaultKilledRunAlwaysLeavesAValidFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "r.json")
	old := &results.Document{Schema: results.Schema, SchemaVersion: results.SchemaVersion, Command: []string{"old"}, Results: []results.Row{}}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	sawNew := false
	for i := 0; i < 8; i++ {
		fh, _ := os.Create(out)
		_ = results.Write(fh, old)
		fh.Close()
		p := startSelf(t, nil, "allreduce", "--backend", "cpu", "-g", "2", "--sizes", "8:4M", "-n", "3", "-w", "1", "-o", out)
		time.Sleep(time.Duration(100+rng.Intn(1500)) * time.Millisecond)
		_ = p.cmd.Process.Kill()
		<-p.done
		d := readRows(t, out)
		if len(d.Command) == 1 && d.Command[0] == "old" {
			continue // killed before the first row: the old file stands
		}
		sawNew = true
		if len(d.Results) == 0 {
			t.Fatalf("try %d: the old file was replaced by one without rows", i)
		}
		for k, r := range d.Results {
			if want := int64(8) << k; r.SizeBytes != want || r.OutOfPlace == nil || r.InPlace == nil {
				t.Fatalf("try %d: row %d is %d B (want %d) or half-written: %+v", i, k, r.SizeBytes, want, r)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 2 {
			t.Logf("try %d: temporary files beside the output: %d entries", i, len(entries))
		}
	}
	if !sawNew {
		t.Log("every kill came before the first row")
	}
}

// TestFaultSignalAtALargeSizeIsPrompt stops runs of 4 ranks in one process
// in the middle of a 512 MiB allreduce on the CPU backend (its fill, warm-up,
// timed loop or check, wherever the signal falls) with SIGINT, SIGTERM, and
// SIGINT twice: each exits within 2 s with 130 or 143, keeping the rows
// measured before. Every copy and loop over the data looks at the abort
// between steps of a few MiB, so nothing holds the stop up.
func TestFaultSignalAtALargeSizeIsPrompt(t *testing.T) {
	cases := []struct {
		sigs  []syscall.Signal
		after time.Duration
		want  int
	}{
		{[]syscall.Signal{syscall.SIGINT}, 100 * time.Millisecond, engine.ExitInterrupted},
		{[]syscall.Signal{syscall.SIGINT}, 900 * time.Millisecond, engine.ExitInterrupted},
		{[]syscall.Signal{syscall.SIGTERM}, 500 * time.Millisecond, engine.ExitTerminated},
		{[]syscall.Signal{syscall.SIGINT, syscall.SIGINT}, 300 * time.Millisecond, engine.ExitInterrupted},
	}
	for _, c := range cases {
		out := filepath.Join(t.TempDir(), "r.json")
		p := startSelf(t, nil, "allreduce", "--backend", "cpu", "-g", "4", "--sizes", "1M,512M", "-n", "5", "-w", "1", "-o", out)
		waitRows(t, p, out, 1) // now in the 512 MiB row
		time.Sleep(c.after)
		var sent time.Time
		for _, sig := range c.sigs {
			_ = p.cmd.Process.Signal(sig)
			sent = time.Now()
			time.Sleep(50 * time.Millisecond)
		}
		code := p.wait(t, 30*time.Second)
		if took := p.ended.Sub(sent); took > 2*time.Second {
			t.Errorf("%v %v after the first row: exited %v after the last signal (want under 2 s)", c.sigs, c.after, took)
		}
		if code != c.want {
			t.Errorf("%v: exit %d, want %d: %s", c.sigs, code, c.want, p.errb)
		}
		if d := readRows(t, out); len(d.Results) != 1 {
			t.Errorf("%v: %d rows kept, want the 1 MiB row", c.sigs, len(d.Results))
		}
	}
}

// TestFaultSecondSignalExitsAtOnce sends SIGINT twice quickly: the launcher
// exits at once, takes its ranks with it and leaves no temporary directory.
func TestFaultSecondSignalExitsAtOnce(t *testing.T) {
	p := startSelf(t, nil, "launch", "-n", "2", "--", "allreduce", "--backend", "cpu", "--sizes", "128M", "-n", "50")
	rankPID(t, 1)
	time.Sleep(time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(50 * time.Millisecond)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	sent := time.Now()
	p.wait(t, 20*time.Second)
	if took := p.ended.Sub(sent); took > 3*time.Second {
		t.Errorf("exited %v after the second signal", took)
	}
	noneLeft(t)
	// Exiting at once still removes the launcher's report directory.
	if left, _ := filepath.Glob(filepath.Join(p.tmp, "collbench-*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// TestFaultLaunchExitsAsItsSignalSays: SIGTERM to launch exits 143 and
// SIGINT 130 every time, whichever rank hears of it first, and the summary
// names no rank as if it were at fault.
func TestFaultLaunchExitsAsItsSignalSays(t *testing.T) {
	t.Parallel()
	for i := 0; i < 6; i++ {
		sig, want := syscall.SIGTERM, engine.ExitTerminated
		if i%3 == 2 {
			sig, want = syscall.SIGINT, engine.ExitInterrupted
		}
		p := startSelf(t, nil, "launch", "-n", "4", "--", "allreduce", "--backend", "cpu", "--sizes", "4M", "-n", "100000", "-q")
		rankPID(t, 3)
		time.Sleep(time.Duration(200+100*i) * time.Millisecond)
		_ = p.cmd.Process.Signal(sig)
		code := p.wait(t, 30*time.Second)
		if code != want {
			t.Errorf("run %d: %v: exit %d, want %d: %s", i+1, sig, code, want, p.errb)
		}
		if s := p.errb.String(); strings.Contains(s, "collbench launch: rank ") || strings.Contains(s, "collbench launch: the cause") {
			t.Errorf("run %d: the summary blames a rank for the launcher's own signal:\n%s", i+1, s)
		}
		noneLeft(t)
	}
}
