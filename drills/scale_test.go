package drills

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"collbench/results"
)

// scaleProcs and scaleHosts are the world of the scale drill: 64 real
// processes over 8 simulated hosts, on whatever cores the machine has.
const (
	scaleProcs = 64
	scaleHosts = 8
)

// launchScale runs `collbench launch -n 64 --nodes 8 -- args...` with
// extra environment, and returns its stdout, stderr, exit code and time.
func launchScale(t *testing.T, bin string, env []string, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"launch", "-n", fmt.Sprint(scaleProcs), "--nodes", fmt.Sprint(scaleHosts), "--"}, args...)...) //nolint:gosec // the binary under test, with the test's own arguments
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	t.Logf("%d processes: %s: exit %d in %.1f s", scaleProcs, strings.Join(args, " "), code, took.Seconds())
	return out.String(), errb.String(), code, took
}

// TestScaleDrill runs one world of 64 collbench processes over 8 simulated
// hosts: it forms, topo writes one host's topology and the hosts' shapes, a small sweep verifies every element, verify-groups
// passes on three layouts, doctor --quick is healthy in under 80 lines, and
// a rank well inside the world (43) that stops itself mid-sweep is named,
// with the rows measured before it kept in the -o file. scripts/scale.sh
// measures the same at 64, 128 and 256 processes.
func TestScaleDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("a world of 64 processes: make test-long (make drills) runs it")
	}
	bin := os.Getenv("COLLBENCH_BIN")
	if bin == "" {
		t.Skip("set COLLBENCH_BIN to a built collbench to run the drills (make test does)")
	}
	out, errs, code, _ := launchScale(t, bin, nil, "world")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d processes on %d hosts; %d of them hold 8 processes each", scaleProcs, scaleHosts, scaleHosts)) {
		t.Fatalf("world: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code, _ = launchScale(t, bin, nil, "topo", "--no-nccl")
	if code != 0 || strings.Count(out, "# topology of ") != 1 || !strings.Contains(out, fmt.Sprintf("%d hosts, %d processes", scaleHosts, scaleProcs)) {
		t.Errorf("topo: exit %d, want one topology and the hosts rolled up\n%s%s", code, out, errs)
	}
	out, errs, code, _ = launchScale(t, bin, nil, "allreduce", "--backend", "cpu", "--sizes", "1K:64K:x4", "-n", "2", "-w", "1", "-q")
	if code != 0 || !strings.Contains(out, "wrong elements:    0 (OK)") {
		t.Errorf("sweep: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code, _ = launchScale(t, bin, nil, "verify-groups", "--backend", "cpu", "--sizes", "1K", "--rank-list", "node", "--rank-list", "cross-node", "--rank-list", "pairs")
	if code != 0 || !strings.Contains(out, "PASS: every value matched") || strings.Count(out, "\n") > 40 {
		t.Errorf("verify-groups: exit %d, %d lines\n%s%s", code, strings.Count(out, "\n"), out, errs)
	}
	out, errs, code, _ = launchScale(t, bin, nil, "doctor", "--backend", "cpu", "--quick", "-q")
	if code != 0 || !strings.Contains(out, ": healthy") || strings.Count(out, "\n") >= 80 {
		t.Errorf("doctor --quick: exit %d, %d lines\n%s%s", code, strings.Count(out, "\n"), out, errs)
	}

	// A rank stops itself (SIGSTOP) at its 60th collective: the heartbeats
	// name it, the run exits 4, and the rows before are in the -o file.
	// Rank 43 is a leaf of the bootstrap tree (its parent is rank 1); rank
	// 1 relays for ranks 33-63, whose own watcher it is.
	for _, victim := range []int{43, 1} {
		rows := t.TempDir() + "/rows.json"
		out, errs, code, took := launchScale(t, bin, []string{fmt.Sprintf("COLLBENCH_FAULTS=stop:%d@60", victim)},
			"allreduce", "--backend", "cpu", "--sizes", "1K:64K:x4", "-n", "5", "-w", "1", "-q", "-o", rows)
		if code != 4 || !strings.Contains(errs+out, fmt.Sprintf("rank %d (", victim)) {
			t.Errorf("a stopped rank %d: exit %d after %.1f s, want 4 naming rank %d\n%s%s", victim, code, took.Seconds(), victim, out, errs)
		}
		b, err := os.ReadFile(rows)
		if err != nil {
			t.Fatalf("no -o file after the stop of rank %d: %v", victim, err)
		}
		d, err := results.Read(bytes.NewReader(b))
		if err != nil || len(d.Results) == 0 || d.Error == "" {
			t.Errorf("the -o file after the stop of rank %d: %v, %d rows, error %q", victim, err, len(d.Results), d.Error)
		}
		if d != nil {
			t.Logf("stopped rank %d named after %.1f s; %d rows kept; %s", victim, took.Seconds(), len(d.Results), d.Error)
		}
	}

	// Rank 45 hangs in its 60th collective: the watchdog on rank 0 names
	// it from the progress its heartbeats carry up through its parent,
	// relay rank 1, and not a rank that waits for it.
	out, errs, code, took := launchScale(t, bin, []string{"COLLBENCH_FAULTS=hang:45@60"},
		"allreduce", "--backend", "cpu", "--sizes", "1K:64K:x4", "-n", "5", "-w", "1", "-q", "--timeout", "5s")
	if code != 4 || !strings.Contains(errs+out, "watchdog: rank 45 (") {
		t.Errorf("a hung rank 45: exit %d after %.1f s, want 4 with the watchdog naming rank 45\n%s%s", code, took.Seconds(), out, errs)
	} else {
		t.Logf("hung rank 45 named by the watchdog after %.1f s", took.Seconds())
	}
}
