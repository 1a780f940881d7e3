package doctor

import (
	"context"
	"io"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/render"
	"collbench/doctor/internal/rules"
)

// What the rest of collbench uses of the doctor's lower floors, which are
// packages of their own under internal/ (facts, record, rules, render;
// docs/architecture.md): the doctor's API is this package alone, and a
// name here is the same type, constant or function as there.

// The types of a doctor run's record, facts and rules.
type (
	Report            = record.Report
	Finding           = record.Finding
	PairFigure        = record.PairFigure
	HostFacts         = facts.HostFacts
	GPUHealth         = facts.GPUHealth
	CounterGrowth     = facts.CounterGrowth
	StageSample       = facts.StageSample
	Sampler           = facts.Sampler
	Knobs             = facts.Knobs
	Rules             = rules.Rules
	Thresholds        = rules.Thresholds
	CounterThresholds = rules.CounterThresholds
	Expectations      = rules.Expectations
	HistoryRules      = render.HistoryRules
	NodeHistory       = render.NodeHistory
	Evidence          = render.Evidence
)

// The constants others name.
const (
	// Schema names a doctor report's JSON.
	Schema = record.Schema
	// CtrNVLinkCRCData is NVLink's counter of data flits that failed
	// their CRC.
	CtrNVLinkCRCData = facts.CtrNVLinkCRCData
)

// DefaultRules judge GPUs: a copy of the rules' own, for reading.
var DefaultRules = rules.DefaultRules

// ReadGPUHealth asks NVML (initialised by the caller) about every GPU.
func ReadGPUHealth(lib nvml.Interface) ([]GPUHealth, string, []string) {
	return facts.ReadGPUHealth(lib)
}

// NewSampler samples the GPUs of lib whose bus ids are busIDs (all of them
// when busIDs is empty) every interval until Stop; a nil lib samples none.
func NewSampler(lib nvml.Interface, host string, busIDs []string, every time.Duration) *Sampler {
	return facts.NewSampler(lib, host, busIDs, every)
}

// HostMemory reports whether a backend's ranks run on host memory (the cpu
// and mpi backends), with no GPU of their own.
func HostMemory(backend string) bool { return facts.HostMemory(backend) }

// DefaultKnobs are the defaults for a backend on GPUs or, with hostMemory,
// on host memory (facts.DefaultKnobs says more).
func DefaultKnobs(hostMemory bool) Knobs { return facts.DefaultKnobs(hostMemory) }

// RulesFor gives a backend its default rules: GPUs DefaultRules, the cpu
// backend CPURules, the mpi backend MPIRules.
func RulesFor(backend string) Rules { return rules.RulesFor(backend) }

// ReadReportFile reads path if it is a doctor report; nil without an error
// where it is a file of another kind (record.ReadReportFile says more).
func ReadReportFile(ctx context.Context, path string) (*Report, error) {
	return record.ReadReportFile(ctx, path)
}

// ParseEvidence accepts auto, summary or all.
func ParseEvidence(s string) (Evidence, error) { return render.ParseEvidence(s) }

// WriteTextWith writes the verdict, then as much evidence as e asks for.
func WriteTextWith(r *Report, w io.Writer, e Evidence) error { return render.WriteTextWith(r, w, e) }

// WriteHTML writes a self-contained page: the verdict and the culprit
// first, the heat maps, then the evidence.
func WriteHTML(r *Report, w io.Writer) error { return render.WriteHTML(r, w) }

// WriteProm writes the report in Prometheus' text exposition format.
func WriteProm(r *Report, w io.Writer) error { return render.WriteProm(r, w) }

// ApplyHistory compares each host's figures with its history in dir and
// saves a complete run's as the newest record (render.ApplyHistory says
// more).
func ApplyHistory(r *Report, dir string, hr HistoryRules, t time.Time, version string) ([]string, error) {
	return render.ApplyHistory(r, dir, hr, t, version)
}

// CheckHistoryDir makes sure dir can keep a history: it exists or can be
// made, can be written, and the records doctor will read are sound.
func CheckHistoryDir(dir string, runs int) error { return render.CheckHistoryDir(dir, runs) }

// HistoryHosts lists the hosts a history directory keeps.
func HistoryHosts(dir string) ([]string, error) { return render.HistoryHosts(dir) }

// LoadNodeHistory reads every record of host in dir.
func LoadNodeHistory(dir, host string) (*NodeHistory, error) {
	return render.LoadNodeHistory(dir, host)
}
