package facts

import (
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/internal/nvmlmock"
)

// TestSamplerReadsTheGPUsItIsGiven samples two GPUs of a mock HGX through
// two stages: each stage gets a sample at its start, between stages none
// is taken, and only the GPUs asked for are read.
func TestSamplerReadsTheGPUsItIsGiven(t *testing.T) {
	m := nvmlmock.HGX("H100")
	m.GPUs[2].SMClockMHz, m.GPUs[2].PowerW, m.GPUs[2].PowerLimitW, m.GPUs[2].TempC = 1110, 301, 300, 71
	m.GPUs[2].ClockReasons = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksEventReasonGpuIdle
	s := NewSampler(m.NVML(), "node-1", []string{"0000:2a:00.0", "00000000:3A:00.0"}, time.Hour)
	s.Stage("alone")
	s.Stage("")
	s.Stage("pairs")
	got := s.Stop()
	if len(got) != 4 {
		t.Fatalf("%d samples, want 2 GPUs x 2 stages: %+v", len(got), got)
	}
	for _, g := range got {
		if g.GPU != 1 && g.GPU != 2 || g.Samples != 1 || g.Host != "node-1" {
			t.Errorf("sample %+v", g)
		}
		if g.GPU == 2 && (g.SMClockMaxMHz != 1110 || g.PowerMaxW != 301 || g.PowerLimitW != 300 || g.TempMaxC != 71 ||
			strings.Join(g.Reasons, ",") != "software power cap") {
			t.Errorf("GPU 2: %+v", g)
		}
		if g.GPU == 1 && (g.SMClockMaxMHz != 1980 || len(g.Reasons) != 0) {
			t.Errorf("GPU 1: %+v", g)
		}
	}
	if again := s.Stop(); len(again) != 4 {
		t.Errorf("a second Stop lost the samples: %d", len(again))
	}
	if none := NewSampler(nil, "h", nil, time.Hour); len(none.Stop()) != 0 {
		t.Error("a sampler without NVML sampled")
	}
}

// TestSeenWhileMeasured names the cause the samples show, or nothing.
func TestSeenWhileMeasured(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    StageSample
		want string
	}{
		{"healthy", StageSample{SMClockMaxMHz: 1980, PowerMaxW: 500, PowerLimitW: 700}, ""},
		{"power cap", StageSample{SMClockMaxMHz: 1200, PowerMaxW: 299, PowerLimitW: 300, Reasons: []string{"software power cap"}},
			"a power cap: it draws all of its 300 W limit"},
		{"cap not reached", StageSample{SMClockMaxMHz: 1980, PowerMaxW: 200, PowerLimitW: 700, Reasons: []string{"software power cap"}}, ""},
		{"thermal", StageSample{SMClockMaxMHz: 1300, TempMaxC: 92, Reasons: []string{"software power cap", "hardware thermal slowdown"}},
			"a thermal throttle"},
		{"brake", StageSample{Reasons: []string{"power brake"}}, "a hardware slowdown"},
		{"locked clocks", StageSample{SMClockMaxMHz: 1005, PowerMaxW: 200, PowerLimitW: 700}, "clocks locked or reduced below their 1980 MHz"},
		{"app clocks", StageSample{SMClockMaxMHz: 1900, Reasons: []string{"application clocks setting"}}, "application clocks set below the maximum"},
	} {
		got, _ := SeenWhileMeasured([]StageSample{tc.s}, 1980)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if c, _ := SeenWhileMeasured(nil, 1980); c != "" {
		t.Error("no samples, yet a cause")
	}
}
