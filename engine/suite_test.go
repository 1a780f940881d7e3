package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"collbench/measure"
)

// TestLoadSuiteResolvesEverySweep runs run --config's reading without
// Cobra: every suite in every group layout is one sweep over the base
// spec, the baseline is found beside the config, the config's comparison
// bands replace the defaults, and a bad suite is a usage error naming its
// line.
func TestLoadSuiteResolvesEverySweep(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gate.yaml")
	yaml := `name: gate
backend: cpu
ranks: 4
iterations: 7
suites:
  - collectives: [allreduce]
    sizes: "1K:4K"
    groups: ["[[0,1],[2,3]]", all]
  - collectives: [broadcast, allgather]
    sizes: "64"
    dtypes: [int8]
thresholds:
  bands:
    - {min_size: 1M, metric: busbw, pct: 3}
acceptance: {min_size: 1M, peak_fraction: 0.5}
baseline: base/b.json
output: out
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base := measure.Spec{Iters: 20, Warmup: 5, Check: 1, DType: "float", Op: "sum", Root: "0", Mode: "both"}
	p, err := LoadSuite(context.Background(), path, base)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "gate" || p.Output != "out" || p.Baseline != filepath.Join(dir, "base/b.json") {
		t.Errorf("name %q, output %q, baseline %q", p.Name, p.Output, p.Baseline)
	}
	if len(p.Sweeps) != 3 {
		t.Fatalf("%d sweeps, want 3 (two layouts of the first suite, one of the second)", len(p.Sweeps))
	}
	if s := p.Sweeps[0]; s.Layout != "[[0,1],[2,3]]" || s.Backend != "cpu" || s.Ranks != 4 || s.Spec.Iters != 7 || s.Spec.Sizes != "1K:4K" || s.Spec.DType != "float" {
		t.Errorf("first sweep %+v", s)
	}
	if s := p.Sweeps[2]; s.Spec.DType != "int8" || s.Spec.Sizes != "64" || strings.Join(s.Collectives, ",") != "broadcast,allgather" || len(s.Spec.Collectives) != 2 {
		t.Errorf("third sweep %+v", s)
	}
	if len(p.Thresholds.Bands) != 1 || p.Thresholds.Bands[0].MinSize != 1<<20 || p.Thresholds.Bands[0].Pct != 3 {
		t.Errorf("bands %+v", p.Thresholds.Bands)
	}
	if p.Acceptance == nil || p.Acceptance.MinSize != 1<<20 || p.Acceptance.PeakFraction != 0.5 {
		t.Errorf("acceptance %+v", p.Acceptance)
	}

	bad := strings.Replace(yaml, "[broadcast, allgather]", "[broadcast, allgathr]", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadSuite(context.Background(), path, base)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "allgathr") || !strings.Contains(err.Error(), "line") {
		t.Errorf("a misspelt collective: %v", err)
	}
}

// TestDoctorLoadConfig reads doctor's section of a config into the run's
// rules, and refuses a file that is not a config.
func TestDoctorLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.yaml")
	if err := os.WriteFile(path, []byte("doctor:\n  thresholds:\n    default: {drop: 0.3}\n  history: {drop: 0.1, runs: 4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var d Doctor
	h, err := d.LoadConfig(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Thresholds == nil || d.Thresholds.Default.Drop != 0.3 || h.Drop != 0.1 || h.Runs != 4 {
		t.Errorf("thresholds %+v, history %+v", d.Thresholds, h)
	}
	if err := os.WriteFile(path, []byte("doctor: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ue *UsageError
	if _, err := d.LoadConfig(context.Background(), path); !errors.As(err, &ue) {
		t.Errorf("a broken file: %v", err)
	}
}
