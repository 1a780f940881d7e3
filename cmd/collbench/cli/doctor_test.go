package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"collbench/backend/cpu"
	"collbench/bootstrap"
	"collbench/doctor"
	"collbench/engine"
	"collbench/internal/faults"
)

func TestDoctorHealthyOnCPUWritesEveryFormat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, out, errOut := testFactory()
	js, prom, html := filepath.Join(dir, "d.json"), filepath.Join(dir, "d.prom"), filepath.Join(dir, "d.html")
	code := run(t, f, "doctor", "--backend", "cpu", "-g", "4", "-o", js, "--prom", prom, "--html", html, "--quick")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.HasPrefix(out.String(), "# collbench doctor (quick): 4 ranks on 1 host(s), cpu backend") || !strings.Contains(out.String(), "healthy") {
		t.Errorf("verdict line: %q", strings.SplitN(out.String(), "\n", 2)[0])
	}
	var rep doctor.Report
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &rep); err != nil || !rep.Healthy || len(rep.GPUs) != 4 || len(rep.Pairs) != 2 || rep.World == nil {
		t.Fatalf("report %v: %+v", err, rep)
	}
	p, _ := os.ReadFile(prom)
	if !strings.Contains(string(p), `collbench_doctor_healthy{mode="quick"} 1`) {
		t.Errorf("prom file:\n%s", p)
	}
	if h, _ := os.ReadFile(html); !strings.Contains(string(h), "Healthy") {
		t.Error("html report lacks the verdict")
	}
}

// TestDoctorNamesACorruptingRankInOneProcess plants a rank whose outputs
// are corrupted: doctor names it, alone, and exits 1.
func TestDoctorNamesACorruptingRankInOneProcess(t *testing.T) {
	t.Parallel()
	fs, err := faults.Parse("corrupt:2")
	if err != nil {
		t.Fatal(err)
	}
	f, out, errOut := testFactory()
	f.CPUOptions = cpu.Options{Faults: fs}
	code := run(t, f, "doctor", "--backend", "cpu", "-g", "4", "--format", "json")
	if code != engine.ExitCheckFailed {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep doctor.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Healthy || len(rep.Findings) != 1 || rep.Findings[0].Kind != "wrong-data" || rep.Findings[0].Ranks[0] != 2 {
		t.Fatalf("findings %+v", rep.Findings)
	}
	if !strings.Contains(rep.Findings[0].Msg, "first: rank 2 (testhost) element") {
		t.Errorf("the first wrong element is not named: %q", rep.Findings[0].Msg)
	}
}

func TestDoctorBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "--format", "xml"},
		{"doctor", "--bw-size", "lots", "--backend", "cpu"},
		{"doctor", "-o", "/nonexistent/dir/d.json", "--backend", "cpu"},
		{"doctor", "--config", "/nonexistent.yaml"},
		{"doctor", "--timeout", "-1s", "--backend", "cpu"},
	} {
		f, _, errOut := testFactory()
		if code := run(t, f, args...); code != engine.ExitUsage || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestFaultFindingNamesThePart: each fault that can end a doctor run
// becomes the finding that names the rank at fault (or the run, for a
// signal), with the kind a dashboard can count.
func TestFaultFindingNamesThePart(t *testing.T) {
	who := func(r int) string { return fmt.Sprintf("rank %d (node-%d, GPU 0000:%02d:00.0)", r, r/8, r%8) }
	cases := []struct {
		err             error
		sev, kind, part string
		ranks           []int
	}{
		{&bootstrap.PeerError{Kind: bootstrap.FaultHung, Rank: 13, Msg: "watchdog: rank 13 has not finished"}, "FAIL", "hung-rank", "rank 13 (node-1, GPU 0000:05:00.0)", []int{13}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultSilent, Rank: 2, Msg: "rank 2 stopped answering"}, "FAIL", "silent-rank", "rank 2 (node-0, GPU 0000:02:00.0)", []int{2}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultDisconnected, Rank: 9, Msg: "rank 9 disconnected"}, "FAIL", "lost-rank", "rank 9 (node-1, GPU 0000:01:00.0)", []int{9}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultFailed, Rank: 4, Msg: "rank 4 failed: out of memory"}, "FAIL", "failed-rank", "rank 4 (node-0, GPU 0000:04:00.0)", []int{4}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultInterrupted, Rank: 3, Msg: "rank 3 was interrupted"}, "WARN", "interrupted", "rank 3 (node-0, GPU 0000:03:00.0)", []int{3}},
		{&engine.SignalError{Sig: syscall.SIGTERM}, "WARN", "interrupted", "the run", nil},
		{&engine.RunError{Err: errors.New("ncclCommInitRank: unhandled system error")}, "FAIL", "run-failed", "the run", nil},
	}
	for _, c := range cases {
		f := faultFinding(c.err, who)
		if f.Severity != c.sev || f.Kind != c.kind || f.Part != c.part || !slices.Equal(f.Ranks, c.ranks) || f.Msg == "" || f.Cause == "" {
			t.Errorf("%v: %+v", c.err, f)
		}
	}
	if f := faultFinding(&engine.SignalError{Sig: syscall.SIGTERM}, who); f.Msg != "the run was terminated before the verdict" {
		t.Errorf("signal: %q", f.Msg)
	}
}
