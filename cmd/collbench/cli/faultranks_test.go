package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"collbench/backend/cpu"
	"collbench/engine"
	"collbench/internal/faults"
	"collbench/results"
)

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
