package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"collbench/backend/cpu"
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
	// Host memory in the report's words: no kernel, no GPU, no NCCL.
	for _, gpuWord := range []string{"fill kernel", "GPU alone", "NVML facts for its GPU"} {
		if strings.Contains(out.String(), gpuWord) {
			t.Errorf("the cpu backend's report says %q:\n%s", gpuWord, out)
		}
	}
	if !strings.Contains(out.String(), "the fill loop") {
		t.Errorf("no fill loop in the report:\n%s", out)
	}
	var rep doctor.Report
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &rep); err != nil || !rep.Healthy || len(rep.GPUs) != 4 || len(rep.Pairs) != 6 || rep.World == nil {
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
