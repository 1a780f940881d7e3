// Package record is the doctor's record: its findings, its figures, the
// report with its schema, and the report's JSON.
package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"collbench/doctor/internal/facts"
	"collbench/internal/bounded"
	"collbench/internal/jsonwords"
)

// Schema names the doctor's JSON report.
const Schema = "collbench/doctor"

// SchemaVersion is the version of the JSON report this collbench writes
// and the newest it reads.
const SchemaVersion = 1

// Finding is one part doctor names, with the figure that condemns it.
type Finding struct {
	Severity string  `json:"severity"` // FAIL or WARN
	Stage    string  `json:"stage"`    // health, gpu, pair, host, world, data
	Kind     string  `json:"kind"`
	Part     string  `json:"part"` // the part named: a GPU, a pair, a NIC, a host, a rank
	Host     string  `json:"host,omitempty"`
	Ranks    []int   `json:"ranks,omitempty"`
	Value    float64 `json:"value,omitempty"`
	Peers    float64 `json:"peers,omitempty"`
	Expected float64 `json:"expected,omitempty"`
	Unit     string  `json:"unit,omitempty"`
	Msg      string  `json:"msg"`
	Cause    string  `json:"cause,omitempty"`
}

// Line is the finding as one verdict line.
func (f Finding) Line() string {
	s := fmt.Sprintf("%s %s: %s", f.Severity, f.Part, f.Msg)
	if f.Cause != "" {
		s += "; " + f.Cause
	}
	return s
}

// GPUFigure is one rank alone.
type GPUFigure struct {
	Rank     int     `json:"rank"`
	Host     string  `json:"host"`
	Device   string  `json:"device"`
	BusID    string  `json:"bus_id,omitempty"`
	CopyGBps float64 `json:"copy_gbps"` // a device-to-device copy, bytes/s
	// CopyExpected is what a healthy GPU of its model copies (0: no
	// expectation could be formed).
	CopyExpected float64 `json:"copy_expected_gbps,omitempty"`
	// FillExpected is what a healthy GPU of its model fills (0: none).
	FillExpected float64 `json:"fill_expected_gelem,omitempty"`
	FillGelem    float64 `json:"fill_gelem"` // the fill kernel: the compute probe, 1e9 elements/s
	// FillSustained is the fill kernel's rate over a loop of many kernels
	// spanning the driver's time slices (events around the whole loop), as
	// a user of the GPU gets it; 0 where not measured (host memory). Far
	// below FillGelem, the GPU's time went to another workload.
	FillSustained float64 `json:"fill_sustained_gelem,omitempty"`
	// SustainedMS is how long that loop ran.
	SustainedMS float64 `json:"sustained_ms,omitempty"`
}

// PairFigure is one pair of ranks on a host: GB/s per direction.
type PairFigure struct {
	A         int     `json:"a"`
	B         int     `json:"b"`
	Host      string  `json:"host"`
	Class     string  `json:"class"`
	Expected  float64 `json:"expected_gbps,omitempty"`
	AB        float64 `json:"a_to_b_gbps"`
	BA        float64 `json:"b_to_a_gbps"`
	Both      float64 `json:"both_ways_gbps"` // per direction, both at once
	LatencyUS float64 `json:"latency_us"`
	Transport string  `json:"transport,omitempty"`
}

// OneWay is the pair's slower direction.
func (p PairFigure) OneWay() float64 { return min(p.AB, p.BA) }

// CrossFigure is one pair of ranks on two different hosts: local rank
// LocalA of HostA and LocalB of HostB. A rail is a pair of the same local
// rank on both hosts.
type CrossFigure struct {
	HostA  string  `json:"host_a"`
	HostB  string  `json:"host_b"`
	A      int     `json:"a"`
	B      int     `json:"b"`
	LocalA int     `json:"local_a"`
	LocalB int     `json:"local_b"`
	Both   float64 `json:"both_ways_gbps"`
}

// Rail says whether the pair is a rail: the same local rank on both hosts.
func (c CrossFigure) Rail() bool { return c.LocalA == c.LocalB }

// HostPairFigure is an allreduce over every rank of two hosts.
type HostPairFigure struct {
	A     string  `json:"a"`
	B     string  `json:"b"`
	Round int     `json:"round"`
	BusBW float64 `json:"busbw_gbps"`
}

// WorldFigure is the allreduce over the whole world.
type WorldFigure struct {
	Ranks    int      `json:"ranks"`
	Bytes    int64    `json:"bytes"`
	BusBW    float64  `json:"busbw_gbps"`
	Expected float64  `json:"expected_gbps,omitempty"`
	Bisect   []string `json:"bisect,omitempty"`
}

// PlanStep is one round doctor ran.
type PlanStep struct {
	Stage  string `json:"stage"`
	Round  int    `json:"round"`
	Layout string `json:"layout"`
	What   string `json:"what"`
}

// Report is what doctor found and the evidence.
type Report struct {
	Schema string `json:"schema"`
	// Version is the report's SchemaVersion (0 in reports written before
	// it was kept: read as 1).
	Version  int       `json:"schema_version,omitempty"`
	Healthy  bool      `json:"healthy"`
	Findings []Finding `json:"findings"`
	Mode     string    `json:"mode"` // quick or full
	Backend  string    `json:"backend"`
	Ranks    int       `json:"ranks"`
	Hosts    []string  `json:"hosts"`
	// Machines counts the machines (boot ids) the hosts ran on, where the
	// backend's ranks share their machine's cores (cpu, mpi): simulated
	// hosts on one machine are one.
	Machines int               `json:"machines,omitempty"`
	Seconds  float64           `json:"seconds"`
	Facts    []facts.HostFacts `json:"facts,omitempty"`
	// Samples are NVML's clocks, power, temperature and clock event
	// reasons of every GPU while each stage ran.
	Samples []facts.StageSample `json:"samples,omitempty"`
	// Counters are the error counters that grew while each stage ran, with
	// the traffic over their parts meanwhile, and the XID events.
	Counters []facts.CounterGrowth `json:"counter_growth,omitempty"`
	// Watched says which error counters doctor could read on each host
	// (hosts alike share a line).
	Watched []string `json:"counters_watched,omitempty"`
	// History is every host's figures against its own past runs
	// (doctor --history).
	History  []HistoryChange  `json:"history,omitempty"`
	GPUs     []GPUFigure      `json:"gpus,omitempty"`
	Pairs    []PairFigure     `json:"pairs,omitempty"`
	Cross    []CrossFigure    `json:"cross_host_pairs,omitempty"`
	HostPair []HostPairFigure `json:"host_pairs,omitempty"`
	// Leaves are the rails measured between hosts of different leaves,
	// where a cluster file gives the fabric.
	Leaves []CrossFigure `json:"between_leaves,omitempty"`
	World  *WorldFigure  `json:"world,omitempty"`
	// PathsSeen says, by stage, how many paths between hosts NCCL's proxy
	// showed inside doctor's own collectives (collbench's profiler
	// plugin); SlowPaths are those judged slow.
	PathsSeen []PathsSeen  `json:"paths_seen,omitempty"`
	SlowPaths []PathFigure `json:"slow_paths,omitempty"`
	Plan      []PlanStep   `json:"plan"`
	Notes     []string     `json:"notes,omitempty"`
	// Completed are the stages that ran to the end; StoppedIn is the stage
	// a fault (a hung, stopped or lost rank, a signal) ended the run in.
	Completed []string `json:"completed"`
	StoppedIn string   `json:"stopped_in,omitempty"`
	// NoExpectation says which figures were judged against their peers
	// only, and why no expectation could be formed for them.
	NoExpectation []string `json:"no_expectation,omitempty"`
	// Stages say how long each stage took, or why it did not run.
	Stages []StageTime `json:"stages,omitempty"`
	// Modelled says the times are a cluster model's, not measured (a run
	// of doctor --simulate).
	Modelled bool `json:"modelled,omitempty"`
}

// StageTime is one stage of a run: its wall time, or why it was skipped.
type StageTime struct {
	Stage   string  `json:"stage"`
	Seconds float64 `json:"seconds"`
	// Rounds is how many rounds of traffic the stage ran (each a layout of
	// the world into groups), suspects measured again included.
	Rounds  int    `json:"rounds"`
	Skipped string `json:"skipped,omitempty"`
}

// AddFault records the fault that ended the run as a finding, first among
// those of its severity: the report is then never healthy.
func (r *Report) AddFault(f Finding) {
	r.Findings = append([]Finding{f}, r.Findings...)
	SortFindings(r.Findings)
	r.Healthy = false
}

var severityOrder = map[string]int{"FAIL": 0, "WARN": 1}

var stageOrder = map[string]int{"run": -1, "data": 0, "health": 1, "host": 2, "gpu": 3, "pair": 4, "world": 5, "history": 6}

// SortFindings puts the most severe first: failures, then by stage.
func SortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if d := severityOrder[a.Severity] - severityOrder[b.Severity]; d != 0 {
			return d
		}
		return stageOrder[a.Stage] - stageOrder[b.Stage]
	})
}

// HistoryChange is one figure of a node against its own past.
type HistoryChange struct {
	Host     string  `json:"host"`
	Part     string  `json:"part"`
	Metric   string  `json:"metric"`
	Now      float64 `json:"now"`
	Baseline float64 `json:"baseline"` // the median of the past runs; for counters, the highest past rate
	Runs     int     `json:"runs"`
	Since    string  `json:"since"` // the oldest past run compared, RFC 3339
	Flagged  bool    `json:"flagged,omitempty"`
}

// Ratio is now over the baseline (0 without a baseline).
func (c HistoryChange) Ratio() float64 {
	if c.Baseline > 0 {
		return c.Now / c.Baseline
	}
	return 0
}

// PathFigure is one network path between hosts as doctor's own
// collectives used it, from NCCL's proxy through collbench's profiler
// plugin: rank From handed Bytes to the network for rank To, which was
// busy with them for WireUS. The report keeps the paths judged slow.
type PathFigure struct {
	Stage    string  `json:"stage"`
	From     int     `json:"from"`
	To       int     `json:"to"`
	FromHost string  `json:"from_host"`
	ToHost   string  `json:"to_host"`
	Bytes    int64   `json:"bytes"`
	WireUS   float64 `json:"wire_us"`
	GBps     float64 `json:"gbps"`
	// Peers is the median of the stage's other paths that were not
	// flagged; Expected the NIC's rate (0 when unknown).
	Peers    float64 `json:"peers"`
	Expected float64 `json:"expected,omitempty"`
	Why      string  `json:"why,omitempty"`
}

// PathsSeen says how many paths between hosts a stage's collectives
// showed through NCCL's proxy, and their median rate.
type PathsSeen struct {
	Stage  string  `json:"stage"`
	Paths  int     `json:"paths"`
	Median float64 `json:"median_gbps"`
	Slow   int     `json:"slow"`
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	out := *r
	out.Version = SchemaVersion
	return enc.Encode(&out)
}

// ErrNotReport says a file is not a doctor report.
var ErrNotReport = errors.New("not a collbench doctor report")

// IsReport says whether data is a doctor JSON report (by its schema
// name), without reading it whole.
func IsReport(data []byte) bool {
	var probe struct {
		Schema string `json:"schema"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Schema == Schema
}

// ReadReportFile reads path if it is a doctor report; nil without an error
// where it is a regular file of another kind (results), or not a regular
// file (a pipe or device is read once, as results). A report of a newer
// schema is refused by name.
func ReadReportFile(ctx context.Context, path string) (*Report, error) {
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return nil, nil
	}
	data, err := bounded.ReadFile(ctx, path, bounded.Results)
	if err != nil {
		var big *bounded.TooLargeError
		if errors.As(err, &big) {
			return nil, err
		}
		return nil, fmt.Errorf("cannot read %s: %v", path, err)
	}
	if !IsReport(data) {
		return nil, nil
	}
	r, err := ReadReport(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return r, nil
}

// ReadReport reads a doctor JSON report, refusing one of a newer schema
// than this collbench reads.
func ReadReport(data []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotReport, jsonwords.Problem(err))
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("%w: its schema is %q", ErrNotReport, r.Schema)
	}
	if r.Version > SchemaVersion {
		return nil, fmt.Errorf("a doctor report of a newer collbench (schema version %d; this one reads %d): open it with that version", r.Version, SchemaVersion)
	}
	return &r, nil
}
