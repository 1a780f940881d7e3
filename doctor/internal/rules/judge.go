// Package rules is the doctor's rules: what is slow against its peers and
// against the peak (judge.go), what a GPU model should do (expect.go), how
// far error counters may grow (countjudge.go), a registry of rules over the
// health facts (health.go), and the rounds' plans (plan.go).
package rules

import (
	"fmt"
	"math"
	"strings"

	"collbench/doctor/internal/facts"
)

// Rules decide when a figure is far enough below what it should reach to
// be a finding. A figure is a suspect when it is more than Drop below the
// median of its peers of the same link class, or below PeakFraction of what
// the topology says its link carries. Suspects are measured again before
// they are reported.
type Rules struct {
	Drop         float64 `json:"drop" yaml:"drop"`                   // e.g. 0.25: 25 % below the peers' median
	PeakFraction float64 `json:"peak_fraction" yaml:"peak_fraction"` // e.g. 0.35 of the expected link bandwidth
}

// DefaultRules for GPUs: measured on H200 NVLink pairs, a healthy pair
// reaches 69-75 % of the per-direction NVLink peak at 256 MiB and peers
// differ by a few percent; a pair through shared memory reaches under 10 %.
var DefaultRules = Rules{Drop: 0.25, PeakFraction: 0.35}

// CPURules for the host-memory backends (cpu, mpi), whose ranks share a host's cores: the best
// iteration of healthy peers still varies by a factor of two or three when
// eight processes share two cores, so only a drop below 30 % of the peers
// counts, and there is no link peak to compare with on one host.
var CPURules = Rules{Drop: 0.7, PeakFraction: 0}

// MPIRules for the mpi backend: Open MPI's ranks poll for messages, so when
// a host's ranks outnumber its cores a pair runs fast only while the
// scheduler runs both of its processes at once. Healthy pairs of 4 ranks on
// 2 cores measured 1.15-9.85 GB/s one way in 12 runs, in two modes (about
// 1.45 and 8), the slowest at 12 % of its peers' median and slow again when
// measured alone; so only a pair below 7 % of its peers counts (a link
// delayed by a planted fault runs at under 1 %).
var MPIRules = Rules{Drop: 0.93, PeakFraction: 0}

// RulesFor gives a backend its default rules: GPUs DefaultRules, the cpu
// backend CPURules, the mpi backend MPIRules.
func RulesFor(backend string) Rules {
	switch backend {
	case "mpi":
		return MPIRules
	case "cpu":
		return CPURules
	}
	return DefaultRules
}

// Thresholds are the rules by link class (NV18, PIX, SYS, rail, host,
// gpu, world...), with Default for the rest.
type Thresholds struct {
	Default Rules            `json:"default" yaml:"default"`
	Class   map[string]Rules `json:"classes,omitempty" yaml:"classes"`
}

// For returns the rules of a class.
func (t Thresholds) For(class string) Rules {
	if r, ok := t.Class[class]; ok {
		return r
	}
	return t.Default
}

// Validate checks the fractions.
func (t Thresholds) Validate() error {
	check := func(name string, r Rules) error {
		if r.Drop <= 0 || r.Drop >= 1 {
			return fmt.Errorf("thresholds %s: drop %v must be between 0 and 1 (e.g. 0.25)", name, r.Drop)
		}
		if r.PeakFraction < 0 || r.PeakFraction >= 1 {
			return fmt.Errorf("thresholds %s: peak_fraction %v must be between 0 and 1, or 0 for none", name, r.PeakFraction)
		}
		return nil
	}
	if err := check("default", t.Default); err != nil {
		return err
	}
	for c, r := range t.Class {
		if err := check(c, r); err != nil {
			return err
		}
	}
	return nil
}

// Sample is one figure to judge: higher is better.
type Sample struct {
	Key      string  `json:"key"`
	Class    string  `json:"class"`
	Value    float64 `json:"value"`
	Expected float64 `json:"expected,omitempty"` // what the link should carry; 0 when unknown
}

// Suspect is a sample the rules flag. Its fields travel to every process,
// which follow rank 0's decisions.
type Suspect struct {
	Sample
	Peers  float64 `json:"peers"` // median of the class, without the suspects
	Why    string  `json:"why"`
	Metric string  `json:"metric,omitempty"` // which figure was flagged, where there are several
}

// Judge flags the samples far below their class's median or expectation.
// The peers figure is the median of the class's samples that are not
// flagged, so a few slow ones do not drag down what healthy peers reach.
// A noisy class's drop is widened (classDrop) so that noise alone does not
// name a healthy part.
func Judge(samples []Sample, th Thresholds) []Suspect {
	return judgeAt(samples, th, true)
}

// Suspects flags, for a stage that measures each suspect again before it
// names one, every sample below its class's rule drop, noisy class or
// not: the measurements again are what keep noise from naming a healthy
// part there, and a widened drop would let a slow part hide in a noisy
// class (a link at an eighth of its peers' rate on a loaded host).
func Suspects(samples []Sample, th Thresholds) []Suspect {
	return judgeAt(samples, th, false)
}

// judgeAt is judge, with the drop widened in noisy classes or not.
func judgeAt(samples []Sample, th Thresholds, widen bool) []Suspect {
	classes := map[string][]Sample{}
	var order []string
	for _, s := range samples {
		if _, ok := classes[s.Class]; !ok {
			order = append(order, s.Class)
		}
		classes[s.Class] = append(classes[s.Class], s)
	}
	var out []Suspect
	for _, c := range order {
		ss := classes[c]
		r := th.For(c)
		vals := make([]float64, len(ss))
		for i, s := range ss {
			vals[i] = s.Value
		}
		m := facts.Median(vals)
		// With two peers the median sits between them: compare with the
		// better one instead.
		if len(ss) == 2 {
			m = max(vals[0], vals[1])
		}
		drop := r.Drop
		if widen {
			drop = classDrop(r.Drop, vals, m)
		}
		var flagged []Suspect
		var healthy []float64
		for _, s := range ss {
			var why []string
			if len(ss) > 1 && s.Value < m*(1-drop) {
				why = append(why, fmt.Sprintf("%.0f%% below its %d peers' median", (1-s.Value/m)*100, len(ss)-1))
			}
			if s.Expected > 0 && r.PeakFraction > 0 && s.Value < r.PeakFraction*s.Expected {
				why = append(why, fmt.Sprintf("%.0f%% of the %.0f GB/s its link should carry", s.Value/s.Expected*100, s.Expected))
			}
			if len(why) > 0 {
				flagged = append(flagged, Suspect{Sample: s, Why: strings.Join(why, "; ")})
			} else {
				healthy = append(healthy, s.Value)
			}
		}
		peers := facts.Median(healthy)
		if len(healthy) == 0 {
			peers = m
		}
		for i := range flagged {
			flagged[i].Peers = peers
		}
		out = append(out, flagged...)
	}
	return out
}

// classDrop is how far below its peers' median a figure of a class must
// fall to be flagged: the rule's drop, widened where the class is noisy
// and large, so that the chance of flagging any healthy figure of the
// class stays under falseAlarms however many figures it has. Healthy
// figures spread around the median with a robust deviation (1.4826 times
// the median absolute deviation); with n figures, a healthy one falls
// below z of those deviations with chance falseAlarms/n at most, where z
// is the normal quantile of 1 - falseAlarms/n (a Bonferroni bound).
func classDrop(rule float64, vals []float64, m float64) float64 {
	n := len(vals)
	if n < 8 || m <= 0 {
		return rule
	}
	dev := make([]float64, n)
	for i, v := range vals {
		dev[i] = math.Abs(v-m) / m
	}
	sigma := 1.4826 * facts.Median(dev)
	z := math.Sqrt2 * math.Erfinv(1-2*FalseAlarms/float64(n))
	return min(max(rule, z*sigma), 0.9)
}

// FalseAlarms is the chance the doctor accepts, over all the figures it
// judges at once, of naming a healthy part.
const FalseAlarms = 0.01
