package runconfig

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestShippedConfigsLoad(t *testing.T) {
	paths, _ := filepath.Glob("../configs/*.yaml")
	if len(paths) < 3 {
		t.Fatalf("configs: %v", paths)
	}
	for _, p := range paths {
		c, err := Load(context.Background(), p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if c.Name == "" || c.Description == "" || len(c.Suites) == 0 {
			t.Errorf("%s: needs a name, a description and suites", p)
		}
	}
	c, _ := Load(context.Background(), "../configs/acceptance.yaml")
	if c.Acceptance == nil || c.Acceptance.PeakFraction != 0.5 || int64(c.Acceptance.MinSize) != 1<<30 || c.Suites[0].Line == 0 {
		t.Errorf("acceptance: %+v", c.Acceptance)
	}
	c, _ = Load(context.Background(), "../configs/ci.yaml")
	if c.Thresholds == nil || len(c.Thresholds.Bands) != 2 || int64(c.Thresholds.Bands[1].MinSize) != 1<<20 || c.Resolve(c.Baseline) != "../baselines/ci.json" {
		t.Errorf("ci: %+v %s", c.Thresholds, c.Resolve(c.Baseline))
	}
}

// TestSuiteWordsAreTheFlagsWords: every spelling a flag takes, a suite
// takes (mode: oop was refused while --mode oop ran).
func TestSuiteWordsAreTheFlagsWords(t *testing.T) {
	for _, w := range []string{"mode: oop", "mode: ip", "mode: in-place", "dtypes: [fp32, bf16]", "ops: [all]", "root: all", "sizes: 8:1M:x4", "bitwise: 3"} {
		if _, err := Parse([]byte("suites:\n  - collectives: [allreduce]\n    " + w + "\n")); err != nil {
			t.Errorf("%s: %v", w, err)
		}
	}
}

func TestConfigErrorsNameLineAndKey(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"name: x\nsuites:\n  - collectives: [allreduce]\n    sizez: 8:1M\n", `line 4: unknown key "sizez"`},
		{"name: x\nbogus: 1\nsuites: []\n", `line 2: unknown key "bogus"`},
		{"suites:\n  - collectives: [allscatter]\n", `line 2: suite 1: collectives: unknown collective "allscatter"`},
		{"suites:\n  - collectives: [allreduce]\n    sizes: 8:4\n", "line 2: suite 1: sizes: invalid size range"},
		{"suites:\n  - collectives: [allreduce]\n    dtypes: [float128]\n", `dtypes: unknown dtype "float128"`},
		{"suites:\n  - collectives: [allreduce]\n    mode: sideways\n", `line 2: suite 1: mode: unknown --mode "sideways" (valid: both, out-of-place, in-place)`},
		{"suites:\n  - collectives: [allreduce]\n    ops: [xor]\n", `line 2: suite 1: ops: `},
		{"suites:\n  - collectives: [allreduce]\n    bitwise: -1\n", `line 2: suite 1: bitwise: invalid --bitwise -1: must be 1 or more`},
		{"suites:\n  - collectives: [allreduce]\n    dtypes: [int32]\n    bitwise: 2\n", `line 2: suite 1: bitwise: --bitwise compares the bits of reductions of floating-point types, and this plan has none (allreduce of int32)`},
		{"suites:\n  - collectives: [allgather]\n    bitwise: 2\n", `line 2: suite 1: bitwise: --bitwise compares`},
		{"suites:\n  - collectives: [allreduce]\n    groups: [\"[[0,0]]\"]\n", "rank 0 appears twice"},
		{"suites:\n  - collectives: [allreduce]\nthresholds:\n  bands:\n    - {min_size: 1Q, metric: busbw, pct: 5}\n", `line 5: invalid size "1Q"`},
		{"suites:\n  - collectives: [allreduce]\nthresholds:\n  bands:\n    - {min_size: 1M, metric: speed, pct: 5}\n", `metric "speed" must be busbw or time`},
		{"suites:\n  - collectives: [allreduce]\nacceptance: {min_size: 1G, peak_fraction: 1.5}\n", "peak_fraction 1.5"},
		{"iterations: many\nsuites:\n  - collectives: [allreduce]\n", "line 1:"},
		{"suites: {}\n", "line 1:"},
		{"", "empty config"},
		{"name: x\n", "no suites"},
		{"backend: tpu\nsuites:\n  - collectives: [allreduce]\n", `backend "tpu"`},
		{"suites:\n  - collectives: [allreduce\n", "line"},
		{"doctor:\n  expectations:\n    H100: {copy_share: -0.5}\n", "doctor: expectations H100: copy_share -0.5 must be in (0, 1]"},
		{"doctor:\n  expectations:\n    H100: {copy_share: lots}\n", "line 3:"},
		{"doctor:\n  expectations:\n    X9000: {copy_share: 0.8}\n", `doctor: expectations: unknown GPU model "X9000" (known: A100,`},
		{"doctor:\n  expectations:\n    H200: {fill_per_core_cycle: 2}\n", "fill_per_core_cycle 2 must be in (0, 1)"},
		{"doctor:\n  expectations:\n    H200: {}\n", "give copy_share, fill_per_core_cycle or both"},
		{"doctor:\n  expectations:\n    H200: {copy_share: 0.9, speed: 3}\n", `unknown key "speed"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if err == nil {
			t.Errorf("%q accepted", c.yaml)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %q, want one line mentioning %q", c.yaml, err, c.want)
		}
	}
	if _, err := Load(context.Background(), "/nonexistent.yaml"); err == nil || !strings.Contains(err.Error(), "cannot read config") {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzParse: arbitrary YAML is refused or accepted, never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("name: q\nsuites:\n  - collectives: [all]\n    sizes: 8:1M\n"))
	f.Add([]byte("suites:\n  - {collectives: [allreduce], groups: [pairs, \"[[0,1]]\"]}\nthresholds: {bands: [{min_size: 1M, metric: busbw, pct: 5}]}\n"))
	f.Add([]byte("acceptance: {min_size: 1G, peak_fraction: 0.5}\n"))
	f.Add([]byte("doctor: {expectations: {H100: {copy_share: 0.9, fill_per_core_cycle: 0.005}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Parse(data)
	})
}
