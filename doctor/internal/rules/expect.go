package rules

import (
	"fmt"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
)

// What a GPU should do alone, from its own reported limits.
//
// The memory's bandwidth follows from NVML's memory bus width and highest
// memory clock: width/8 bytes per transfer, two transfers per clock (HBM
// and GDDR are double data rate). A device-to-device copy reads and writes
// every byte, so it moves at most half of that. How close a healthy GPU
// comes is a property of its model, measured with collbench doctor on the
// lent machines (docs/doctor.md, "Expectations"); a model not in the table
// is held to defaultCopyFraction of the formula.

// copyFraction is the share of the formula's copy rate that doctor's
// device-to-device copy reaches on a healthy GPU of each model.
var copyFraction = map[string]float64{
	"H100": 0.89, // H100 80GB HBM3 (SXM): 1,494-1,501 GB/s of 1,676 (5120-bit, 2,619 MHz), 6 clean runs
	"H200": 0.87, // H200: 2,097-2,100 GB/s of 2,407 (6016-bit, 3,201 MHz), 3 clean runs
}

// DefaultCopyFraction holds a model without a measured fraction to a
// healthy share typical of HBM parts.
const DefaultCopyFraction = 0.8

// ExpectedCopyGBps is the device-to-device copy rate a healthy GPU of g's
// model reaches (over, where it names the model, replacing the measured
// share), and where the figure comes from; 0 and why not when no
// expectation can be formed.
func ExpectedCopyGBps(g facts.GPUHealth, over Expectations) (float64, string) {
	bw := g.MemoryGBps()
	if bw == 0 {
		return 0, "NVML reported no memory bus width or clock"
	}
	if model, f := over.lookup(g.Name, func(x Expectation) float64 { return x.CopyShare }); model != "" {
		return bw / 2 * f, fmt.Sprintf("%.0f%% of half of %.0f GB/s (%d-bit memory at %d MHz), as the doctor config sets for %s", f*100, bw, g.MemBusWidth, g.MemClockMaxMHz, model)
	}
	for model, f := range copyFraction {
		if strings.Contains(g.Name, model) {
			return bw / 2 * f, fmt.Sprintf("%.0f%% of half of %.0f GB/s (%d-bit memory at %d MHz), as a healthy %s copies", f*100, bw, g.MemBusWidth, g.MemClockMaxMHz, model)
		}
	}
	return bw / 2 * DefaultCopyFraction, fmt.Sprintf("%.0f%% of half of %.0f GB/s (%d-bit memory at %d MHz): a model without a measured fraction",
		DefaultCopyFraction*100, bw, g.MemBusWidth, g.MemClockMaxMHz)
}

// Expectation overrides, for one GPU model, the healthy shares doctor
// holds its GPUs to alone (a doctor config's expectations: section).
type Expectation struct {
	// CopyShare is the share of half the memory bandwidth a healthy GPU's
	// device-to-device copy reaches, in (0, 1].
	CopyShare float64 `json:"copy_share,omitempty" yaml:"copy_share"`
	// FillPerCoreCycle is how many elements the fill kernel writes per CUDA
	// core and SM clock cycle on a healthy GPU.
	FillPerCoreCycle float64 `json:"fill_per_core_cycle,omitempty" yaml:"fill_per_core_cycle"`
}

// Expectations are overrides by GPU model (a key of KnownModels, matched
// inside NVML's name).
type Expectations map[string]Expectation

// KnownModels are the GPU models an expectation may name.
var KnownModels = []string{"A100", "A800", "H100", "H800", "H200", "H20", "GH200", "B100", "B200", "B300", "GB200", "GB300", "L40S", "L40", "L4"}

// Validate checks every model key and share.
func (e Expectations) Validate() error {
	for _, model := range facts.SortedKeys(e) {
		x := e[model]
		switch {
		case !slices.Contains(KnownModels, model):
			return fmt.Errorf("expectations: unknown GPU model %q (known: %s)", model, strings.Join(KnownModels, ", "))
		case x.CopyShare == 0 && x.FillPerCoreCycle == 0:
			return fmt.Errorf("expectations %s: give copy_share, fill_per_core_cycle or both", model)
		case x.CopyShare < 0 || x.CopyShare > 1:
			return fmt.Errorf("expectations %s: copy_share %v must be in (0, 1], e.g. 0.89", model, x.CopyShare)
		case x.FillPerCoreCycle < 0 || x.FillPerCoreCycle >= 1:
			return fmt.Errorf("expectations %s: fill_per_core_cycle %v must be in (0, 1), e.g. 0.00521", model, x.FillPerCoreCycle)
		}
	}
	return nil
}

// lookup is the override for the model in name, if one is set for what.
func (e Expectations) lookup(name string, what func(Expectation) float64) (string, float64) {
	best := ""
	for model, x := range e {
		if strings.Contains(name, model) && what(x) > 0 && len(model) > len(best) {
			best = model
		}
	}
	if best == "" {
		return "", 0
	}
	return best, what(e[best])
}

// fillPerCoreCycle is how many elements doctor's fill kernel writes per
// CUDA core and SM clock cycle on a healthy GPU of each model.
var fillPerCoreCycle = map[string]float64{
	"H100": 0.00521, // H100 80GB HBM3 (SXM): 173.3-174.8 Gelem/s on 16,896 cores at 1,980 MHz, 6 clean runs timed by the GPU's events
	"H200": 0.00521, // H200: 172.5-175.2 Gelem/s on the same cores and clock, 6 clean runs timed by the GPU's events
}

// defaultFillPerCoreCycle holds a model without a measured rate to the
// Hopper parts' rate.
const defaultFillPerCoreCycle = 0.00521

// ExpectedFillGelem is the fill kernel's rate (1e9 elements/s) a healthy
// GPU of g's model reaches, from its CUDA cores and highest SM clock (over
// replacing the measured rate where it names the model), and
// where the figure comes from; 0 and why not when none can be formed.
func ExpectedFillGelem(g facts.GPUHealth, over Expectations) (float64, string) {
	if g.Cores <= 0 || g.SMClockMaxMHz <= 0 {
		return 0, "NVML reported no core count or SM clock"
	}
	perCycle, known := defaultFillPerCoreCycle, "a model without a measured rate"
	for model, v := range fillPerCoreCycle {
		if strings.Contains(g.Name, model) {
			perCycle, known = v, "as a healthy "+model+" fills"
		}
	}
	if model, v := over.lookup(g.Name, func(x Expectation) float64 { return x.FillPerCoreCycle }); model != "" {
		perCycle, known = v, "as the doctor config sets for "+model
	}
	rate := float64(g.Cores) * float64(g.SMClockMaxMHz) * 1e6 * perCycle / 1e9
	return rate, fmt.Sprintf("%.4f elements per core and cycle on %d cores at %d MHz, %s", perCycle, g.Cores, g.SMClockMaxMHz, known)
}
