package engine

import (
	"cmp"
	"context"
	"path/filepath"

	"collbench/doctor"
	"collbench/measure"
	"collbench/report"
	"collbench/runconfig"
)

// SuitePlan is a YAML suite file (run --config) resolved for running:
// every sweep it asks for, one per suite and group layout, each a plan
// spec over the flags' own defaults, and how the run is judged.
type SuitePlan struct {
	// Name is the config's name, or its file's.
	Name string
	// Output is the results directory the config names ("": none).
	Output string
	// Baseline is the baseline the config names, relative to the config's
	// directory ("": none).
	Baseline string
	Sweeps   []SuiteSweep
	// Thresholds judge the comparison: the defaults, with the config's
	// over them.
	Thresholds report.Thresholds
	// Acceptance, when the config sets it, requires rows of at least
	// MinSize bytes to reach PeakFraction of the peak bandwidth.
	Acceptance *SuiteAcceptance
}

// SuiteSweep is one sweep of a suite in one group layout.
type SuiteSweep struct {
	Spec measure.Spec
	// Backend and Ranks are the config's ("" and 0: the flags').
	Backend string
	Ranks   int
	// Layout is a rank list or preset ("": no groups).
	Layout      string
	Collectives []string
	// Line is the suite's line in the file, for errors.
	Line int
}

// SuiteAcceptance is a suite's node acceptance rule.
type SuiteAcceptance struct {
	MinSize      int64
	PeakFraction float64
}

// LoadSuite reads a suite file and resolves every sweep over base (the
// flags' defaults, so a suite and the same command line cannot drift
// apart). A file that is not a valid suite is a UsageError naming its
// line.
func LoadSuite(ctx context.Context, path string, base measure.Spec) (*SuitePlan, error) {
	cfg, err := runconfig.Load(ctx, path)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	p := &SuitePlan{Name: cmp.Or(cfg.Name, filepath.Base(path)), Output: cfg.Output, Baseline: cfg.Resolve(cfg.Baseline), Thresholds: report.DefaultThresholds()}
	for _, s := range cfg.Suites {
		sp, err := s.Spec(cfg, base)
		if err != nil {
			return nil, UsageErrorf("config %s: line %d: %v", path, s.Line, err)
		}
		layouts := s.Groups
		if len(layouts) == 0 {
			layouts = []string{""}
		}
		for _, l := range layouts {
			p.Sweeps = append(p.Sweeps, SuiteSweep{Spec: sp, Backend: cfg.Backend, Ranks: cfg.Ranks, Layout: l, Collectives: s.Collectives, Line: s.Line})
		}
	}
	if t := cfg.Thresholds; t != nil {
		p.Thresholds.AllowMissing, p.Thresholds.Strict = t.AllowMissing, t.Strict
		if len(t.Bands) > 0 {
			p.Thresholds.Bands = nil
			for _, b := range t.Bands {
				p.Thresholds.Bands = append(p.Thresholds.Bands, report.Band{MinSize: int64(b.MinSize), Metric: b.Metric, Pct: b.Pct, FloorUS: b.FloorUS})
			}
		}
	}
	if a := cfg.Acceptance; a != nil {
		p.Acceptance = &SuiteAcceptance{MinSize: int64(a.MinSize), PeakFraction: a.PeakFraction}
	}
	return p, nil
}

// LoadConfig sets d's thresholds, expectations, counter rules and history
// rules from a config file's doctor section (doctor --config), and returns
// the history rules (zero: the defaults). A file that is not valid is a
// UsageError.
func (d *Doctor) LoadConfig(ctx context.Context, path string) (doctor.HistoryRules, error) {
	var history doctor.HistoryRules
	cfg, err := runconfig.Load(ctx, path)
	if err != nil {
		return history, &UsageError{Err: err}
	}
	if c := cfg.Doctor; c != nil {
		d.Thresholds, d.Expectations = c.Thresholds, c.Expectations
		if c.Counters != nil {
			d.Counters = *c.Counters
		}
		if c.History != nil {
			history = *c.History
		}
	}
	d.HistoryRules = history
	return history, nil
}
