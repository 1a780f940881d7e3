// Package runconfig loads collbench suites from YAML: what to run, how to
// judge it, and where to write results. Every error names the file, line
// and key.
package runconfig

import (
	"bytes"
	"cmp"
	"collbench/internal/bounded"
	"collbench/internal/yamlwords"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"collbench/doctor"
	"collbench/measure"
)

// Config is one suite file.
type Config struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Backend     string `yaml:"backend"`
	Ranks       int    `yaml:"ranks"`
	Iterations  int    `yaml:"iterations"`
	Warmup      *int   `yaml:"warmup"` // nil: 5; 0 is no warm-up
	Check       *int   `yaml:"check"`  // nil: 1; 0 is no verification
	// Stable repeats each suite's sweep until it is stable (--stable), at
	// most Cycles times (--cycles; 0: the default bound).
	Stable     bool        `yaml:"stable"`
	Cycles     int         `yaml:"cycles"`
	Suites     []Suite     `yaml:"suites"`
	Thresholds *Thresholds `yaml:"thresholds"`
	Acceptance *Acceptance `yaml:"acceptance"`
	Baseline   string      `yaml:"baseline"`
	Output     string      `yaml:"output"`
	// Doctor sets collbench doctor's thresholds (doctor --config FILE).
	Doctor *DoctorConfig `yaml:"doctor"`

	// Path is the file the config came from; relative paths resolve
	// against its directory.
	Path string `yaml:"-"`
}

// Suite is one set of collectives to sweep.
type Suite struct {
	Collectives []string `yaml:"collectives"`
	Sizes       string   `yaml:"sizes"`
	DTypes      []string `yaml:"dtypes"`
	Ops         []string `yaml:"ops"`
	Root        string   `yaml:"root"`
	Mode        string   `yaml:"mode"`
	// Groups lists rank lists or presets; each runs on its own ("all" = no groups).
	Groups    []string `yaml:"groups"`
	IterStats bool     `yaml:"iter_stats"`
	// Bitwise runs each row's reductions of floating-point types this
	// many times more and compares their bits (--bitwise; 0: off).
	Bitwise int `yaml:"bitwise"`
	Line    int `yaml:"-"`
}

// Thresholds judge a comparison, by size band.
type Thresholds struct {
	Bands        []Band `yaml:"bands"`
	AllowMissing bool   `yaml:"allow_missing"`
	Strict       bool   `yaml:"strict"`
}

// Band: from MinSize up, judge by metric (busbw or time) with pct percent
// (and FloorUS microseconds for times).
type Band struct {
	MinSize Size    `yaml:"min_size"`
	Metric  string  `yaml:"metric"`
	Pct     float64 `yaml:"pct"`
	FloorUS float64 `yaml:"floor_us"`
}

// DoctorConfig holds collbench doctor's thresholds: the default rules and
// rules by hardware class (a link label such as NV18 or PXB, or gpu:<model>,
// rail, host-pair, world).
type DoctorConfig struct {
	Thresholds *doctor.Thresholds `yaml:"thresholds"`
	// Expectations replace, by GPU model, the healthy shares each GPU is
	// held to alone (docs/doctor.md, "Expectations").
	Expectations doctor.Expectations `yaml:"expectations"`
	// Counters set how much each error counter may grow during a stage,
	// by hardware class (docs/doctor.md, "Error counters").
	Counters *doctor.CounterThresholds `yaml:"counters"`
	// History sets how the node's history judges today's figures.
	History *doctor.HistoryRules `yaml:"history"`
}

// Acceptance requires rows of at least MinSize to reach PeakFraction of the
// peak bandwidth (node acceptance).
type Acceptance struct {
	MinSize      Size    `yaml:"min_size"`
	PeakFraction float64 `yaml:"peak_fraction"`
}

// Size is a byte count written as 8, 1K, 64M or 8G.
type Size int64

// UnmarshalYAML parses a size with its line in errors.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if strings.TrimSpace(n.Value) == "0" {
		*s = 0
		return nil
	}
	v, err := measure.ParseSize(n.Value)
	if err != nil {
		return lineErr(n, err)
	}
	*s = Size(v)
	return nil
}

// Load reads and checks a suite file.
func Load(ctx context.Context, path string) (*Config, error) {
	data, err := bounded.ReadFile(ctx, path, bounded.Config)
	if err != nil {
		var big *bounded.TooLargeError
		if errors.As(err, &big) {
			return nil, fmt.Errorf("config %v", err)
		}
		return nil, fmt.Errorf("cannot read config %s: %w", path, err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %v", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse reads and checks a suite from YAML text.
func Parse(data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, tidy(err)
	}
	if len(root.Content) == 0 {
		return nil, errors.New("empty config")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, tidy(err)
	}
	doc := root.Content[0]
	// Counts that are negative (or iterations 0) are named with their line.
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i].Value, doc.Content[i+1]
		switch k {
		case "iterations", "warmup", "check", "ranks":
			var n int
			if err := v.Decode(&n); err != nil {
				continue // the decoder above already said so
			}
			if n < 0 || (n == 0 && k == "iterations") {
				least := "0 or more"
				if k == "iterations" {
					least = "1 or more"
				}
				return nil, lineErr(v, fmt.Errorf("%s: %d must be %s", k, n, least))
			}
		}
	}
	// Remember where each suite starts, for later errors.
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "suites" && doc.Content[i+1].Kind == yaml.SequenceNode {
			for j, s := range doc.Content[i+1].Content {
				if j < len(c.Suites) {
					c.Suites[j].Line = s.Line
				}
			}
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
}

// tidy rewrites yaml's messages as one line: "line 7: unknown key sizez".
func tidy(err error) error { return yamlwords.Tidy(err, "docs/compare.md, suites") }

func lineErr(n *yaml.Node, err error) error { return yamlwords.At(n, err) }

// checkBase is a plan in the flags' words, each valid, over which check
// resolves a suite's own words.
var checkBase = measure.Spec{Iters: 1, Agg: 1, Cycles: 1, Mode: "both", DType: "float", Op: "sum", Root: "0", Average: "mean"}

// check validates a config: at least one suite, every collective, size,
// type, op, mode and group layout known, thresholds and acceptance in
// range, doctor's rules sound.
func (c *Config) check() error {
	if len(c.Suites) == 0 && c.Doctor == nil {
		return errors.New("no suites: list at least one under suites: (or give doctor: thresholds or expectations)")
	}
	if d := c.Doctor; d != nil && d.Thresholds != nil {
		t := *d.Thresholds
		if t.Default == (doctor.Rules{}) {
			t.Default = doctor.DefaultRules // only classes were given
		}
		if err := t.Validate(); err != nil {
			return fmt.Errorf("doctor: %v", err)
		}
	}
	if d := c.Doctor; d != nil {
		if err := d.Expectations.Validate(); err != nil {
			return fmt.Errorf("doctor: %v", err)
		}
		if d.Counters != nil {
			if err := d.Counters.Validate(); err != nil {
				return fmt.Errorf("doctor: %v", err)
			}
		}
		if d.History != nil {
			if err := d.History.Validate(); err != nil {
				return fmt.Errorf("doctor: %v", err)
			}
		}
	}
	switch strings.ToLower(c.Backend) {
	case "", "auto", "cpu", "nccl":
	default:
		return fmt.Errorf("backend %q must be auto, cpu or nccl", c.Backend)
	}
	if c.Iterations < 0 || (c.Warmup != nil && *c.Warmup < 0) || (c.Check != nil && *c.Check < 0) || c.Ranks < 0 || c.Cycles < 0 {
		return errors.New("iterations, warmup, check, ranks and cycles must not be negative")
	}
	for i, s := range c.Suites {
		where := fmt.Sprintf("line %d: suite %d", s.Line, i+1)
		if len(s.Collectives) == 0 {
			return fmt.Errorf("%s: collectives: list at least one", where)
		}
		// The suite's words are the flags' words: each is resolved by the
		// one resolver the flags go through (measure.Spec.Plan), alone over
		// a base whose every word is valid, so that its key is named.
		for _, k := range []struct {
			key string
			set func(*measure.Spec)
		}{
			{"collectives", func(sp *measure.Spec) {}},
			{"sizes", func(sp *measure.Spec) { sp.Sizes = s.Sizes }},
			{"dtypes", func(sp *measure.Spec) { sp.DType = cmp.Or(strings.Join(s.DTypes, ","), sp.DType) }},
			{"ops", func(sp *measure.Spec) { sp.Op = cmp.Or(strings.Join(s.Ops, ","), sp.Op) }},
			{"root", func(sp *measure.Spec) { sp.Root = cmp.Or(s.Root, sp.Root) }},
			{"mode", func(sp *measure.Spec) { sp.Mode = cmp.Or(s.Mode, sp.Mode) }},
			{"bitwise", func(sp *measure.Spec) {
				sp.Bitwise, sp.DType = s.Bitwise, cmp.Or(strings.Join(s.DTypes, ","), sp.DType)
			}},
		} {
			sp, err := Suite{Collectives: s.Collectives}.Spec(c, checkBase)
			if err == nil {
				k.set(&sp)
				_, err = sp.Plan()
			}
			if err != nil {
				return fmt.Errorf("%s: %s: %v", where, k.key, err)
			}
		}
		for _, g := range s.Groups {
			// The world size is known only at run time; check the syntax on a large world.
			if _, err := measure.ParseLayout(g, 1<<16, nil); err != nil {
				return fmt.Errorf("%s: groups: %v", where, err)
			}
		}
	}
	if t := c.Thresholds; t != nil {
		for i, b := range t.Bands {
			if b.Metric != "busbw" && b.Metric != "time" {
				return fmt.Errorf("thresholds: band %d: metric %q must be busbw or time", i+1, b.Metric)
			}
			if b.Pct <= 0 || b.FloorUS < 0 {
				return fmt.Errorf("thresholds: band %d: pct must be positive and floor_us not negative", i+1)
			}
		}
	}
	if a := c.Acceptance; a != nil && (a.PeakFraction <= 0 || a.PeakFraction > 1) {
		return fmt.Errorf("acceptance: peak_fraction %v must be in (0, 1]", a.PeakFraction)
	}
	return nil
}

// Spec is the suite as a plan in the user's words, over base (the flags'
// defaults, so a suite and the same command line cannot drift apart):
// the config's iterations, warm-up, checks and cycles, and the suite's
// collectives, sizes, types, ops, root and mode where it gives them.
// measure.Spec.Plan resolves it, as it does the flags.
func (s Suite) Spec(c *Config, base measure.Spec) (measure.Spec, error) {
	sp := base
	sp.Iters = cmp.Or(c.Iterations, sp.Iters)
	if c.Warmup != nil {
		sp.Warmup = *c.Warmup
	}
	if c.Check != nil {
		sp.Check = *c.Check
	}
	sp.Stable, sp.Cycles = c.Stable, cmp.Or(c.Cycles, sp.Cycles)
	sp.Sizes, sp.IterStats, sp.Bitwise = s.Sizes, s.IterStats, s.Bitwise
	sp.DType, sp.Op = cmp.Or(strings.Join(s.DTypes, ","), sp.DType), cmp.Or(strings.Join(s.Ops, ","), sp.Op)
	sp.Root, sp.Mode = cmp.Or(s.Root, sp.Root), cmp.Or(s.Mode, sp.Mode)
	var err error
	sp.Collectives, err = measure.ParseCollectives(strings.Join(s.Collectives, ","))
	return sp, err
}

// Resolve returns a path of the config relative to its file's directory.
func (c *Config) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) || c.Path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.Path), p)
}
