// Package drills plants faults in a cluster of real collbench processes and
// checks that collbench doctor names each one exactly. It runs the built
// binary named by $COLLBENCH_BIN (make test sets it), so the drills time
// the real program rather than a race-instrumented test binary.
package drills

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"collbench/doctor"
)

// runs is how often each case is drilled ($COLLBENCH_DRILL_RUNS, default 10).
func runs() int {
	if n, err := strconv.Atoi(os.Getenv("COLLBENCH_DRILL_RUNS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// TestDoctorDrills runs doctor on 8 cpu ranks over 2 simulated hosts: clean,
// and with each kind of fault planted: a slow rank, a slow link within a
// host, a slow rail across hosts, a rank that corrupts what it sends, a
// host whose ranks are all slow, and a host whose every GPU pair is slow
// (peer-to-peer off). Each must be named exactly (the right
// rank, pair or host, and nothing else) in every run; clean runs must be
// healthy.
func TestDoctorDrills(t *testing.T) {
	bin := os.Getenv("COLLBENCH_BIN")
	if bin == "" {
		t.Skip("set COLLBENCH_BIN to a built collbench to run the drills (make test does)")
	}
	host, _ := os.Hostname()
	cases := []struct {
		name   string
		faults string
		kind   string
		ranks  []int
		part   string
	}{
		{"clean", "", "", nil, ""},
		{"slow rank", "slow-rank:5:100MB/s", "slow-gpu", []int{5}, ""},
		{"slow link within a host", "slow-link:1-2:100MB/s", "slow-pair", []int{1, 2}, ""},
		{"slow rail across hosts", "slow-link:1-5:100MB/s", "slow-rail", []int{1, 5}, ""},
		{"rank sending wrong data", "corrupt:6", "corrupt-sender", []int{6}, ""},
		{"slow host", "slow-host:" + host + "-node1:100MB/s", "slow-host", nil, "host " + host + "-node1"},
		{"every pair within a host slow", "slow-link:0-1:100MB/s;slow-link:0-2:100MB/s;slow-link:0-3:100MB/s;slow-link:1-2:100MB/s;slow-link:1-3:100MB/s;slow-link:2-3:100MB/s",
			"slow-host-pairs", []int{0, 1, 2, 3}, "host " + host + "-node0"},
	}
	n := runs()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exact := 0
			var took []float64
			for i := 0; i < n; i++ {
				cmd := exec.Command(bin, "launch", "-n", "8", "--nodes", "2", "--", "doctor", "--backend", "cpu", "-q", "--format", "json")
				cmd.Env = append(os.Environ(), "COLLBENCH_FAULTS="+c.faults)
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				start := time.Now()
				err := cmd.Run()
				took = append(took, time.Since(start).Seconds())
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				var rep doctor.Report
				if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
					t.Errorf("run %d: exit %d, no report: %v\n%s", i+1, code, jerr, errb.String())
					continue
				}
				if why := verdictMismatch(rep, code, c.kind, c.ranks, c.part); why != "" {
					t.Errorf("run %d: %s", i+1, why)
					continue
				}
				exact++
			}
			t.Logf("%s: named exactly in %d of %d runs (%.1f-%.1f s each)", c.name, exact, n, slices.Min(took), slices.Max(took))
		})
	}
}

// verdictMismatch says how a report differs from the one expected, or "".
func verdictMismatch(rep doctor.Report, code int, kind string, ranks []int, part string) string {
	if kind == "" {
		if code != 0 || !rep.Healthy || len(rep.Findings) != 0 {
			return fmt.Sprintf("clean run: exit %d, healthy %v, findings %v", code, rep.Healthy, lines(rep))
		}
		return ""
	}
	if code != 1 || rep.Healthy {
		return fmt.Sprintf("exit %d, healthy %v: the fault was missed (%v)", code, rep.Healthy, lines(rep))
	}
	if len(rep.Findings) != 1 {
		return fmt.Sprintf("want exactly one finding, got %d: %v", len(rep.Findings), lines(rep))
	}
	f := rep.Findings[0]
	if f.Kind != kind || (ranks != nil && !slices.Equal(f.Ranks, ranks)) || (part != "" && f.Part != part) {
		return fmt.Sprintf("named %s %q (ranks %v), want %s ranks %v %s", f.Kind, f.Part, f.Ranks, kind, ranks, part)
	}
	return ""
}

func lines(rep doctor.Report) []string {
	var out []string
	for _, f := range rep.Findings {
		out = append(out, f.Line())
	}
	return out
}
