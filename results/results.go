// Package results defines the machine-readable result document collbench
// writes (schema "collbench/result", version 1) and reads back for reports
// and comparisons.
package results

import (
	"collbench/internal/hostload"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Schema names the document type; SchemaVersion is bumped only for changes
// that break readers. New optional fields do not change the version.
const (
	Schema        = "collbench/result"
	SchemaVersion = 1
)

// Document is one run: its configuration, where it ran and every row measured.
type Document struct {
	Schema        string      `json:"schema"`
	SchemaVersion int         `json:"schema_version"`
	Tool          Tool        `json:"tool"`
	Command       []string    `json:"command,omitempty"`
	Started       time.Time   `json:"started"`
	Finished      time.Time   `json:"finished"`
	Config        Config      `json:"config"`
	Environment   Environment `json:"environment"`
	// Topology summarises the machine, where it could be detected.
	Topology *TopologySummary `json:"topology,omitempty"`
	// Communicators describes every rank's communicator (world rank order).
	Communicators []CommInfo `json:"communicators,omitempty"`
	Results       []Row      `json:"results"`
	Summary       Summary    `json:"summary"`
	// Error is set when the run stopped early; Results keeps every row measured before.
	Error string `json:"error,omitempty"`
	// Memory is the memory report (--memory).
	Memory *MemoryReport `json:"memory,omitempty"`
	// Notes are what the run could not do as asked, and why.
	Notes []string `json:"notes,omitempty"`
	// Baseline is set on documents made from several runs (baseline make).
	Baseline *BaselineInfo `json:"baseline,omitempty"`
	// Unread are the line numbers of a benchmark log's measured lines
	// that could not be read and were left out (not kept in JSON).
	Unread []int `json:"-"`
}

// UnreadWords says which lines of the file were left out, "" when none:
// at most eight line numbers, then how many more.
func (d *Document) UnreadWords() string {
	if len(d.Unread) == 0 {
		return ""
	}
	var ls []string
	for i, l := range d.Unread {
		if i == 8 {
			ls = append(ls, fmt.Sprintf("and %d more", len(d.Unread)-8))
			break
		}
		ls = append(ls, strconv.Itoa(l))
	}
	word := "line"
	if len(d.Unread) > 1 {
		word = "lines"
	}
	return fmt.Sprintf("%d measured %s could not be read and %s left out: %s %s", len(d.Unread), word, map[bool]string{true: "were", false: "was"}[len(d.Unread) > 1], word, strings.Join(ls, ", "))
}

// Machine says what ran the document's rows, for telling two machines
// apart: the backend and the GPU models (sorted, each with its count).
func (d *Document) Machine() string {
	backend := d.Environment.Backend.Name
	if backend == "" {
		backend = d.Config.Backend
	}
	count := map[string]int{}
	var names []string
	for _, dev := range d.Environment.Backend.Devices {
		if dev.Name == "" {
			continue
		}
		if count[dev.Name] == 0 {
			names = append(names, dev.Name)
		}
		count[dev.Name]++
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%dx %s", count[n], n))
	}
	if len(parts) == 0 {
		return backend
	}
	return strings.TrimSpace(backend + " on " + strings.Join(parts, ", "))
}

// BaselineInfo records how a baseline was made.
type BaselineInfo struct {
	Runs    int         `json:"runs"`
	Started []time.Time `json:"started,omitempty"`
}

// TopologySummary is the machine shape beside a result: a line for people,
// a fingerprint for comparisons, and the peak bandwidth %peak is against.
type TopologySummary struct {
	Summary     string  `json:"summary"`
	Fingerprint string  `json:"fingerprint"`
	GPUs        int     `json:"gpus"`
	Nodes       int     `json:"nodes,omitempty"`
	Driver      string  `json:"driver,omitempty"`
	NCCL        string  `json:"nccl,omitempty"`
	PeakGBps    float64 `json:"peak_gbps,omitempty"`
	PeakLabel   string  `json:"peak_label,omitempty"`
}

// Tool identifies the program that wrote the document.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
}

// Config is what was asked for.
type Config struct {
	Collectives []string `json:"collectives"`
	Sizes       []int64  `json:"sizes"`
	DTypes      []string `json:"dtypes"`
	Ops         []string `json:"ops"`
	Root        string   `json:"root"` // "0".."n-1" or "all"
	Ranks       int      `json:"ranks"`
	Iters       int      `json:"iters"`
	Warmup      int      `json:"warmup"`
	Check       int      `json:"check"`
	Mode        string   `json:"mode"`    // both, out-of-place, in-place
	Average     string   `json:"average"` // mean, min, max, rank0
	Seed        uint64   `json:"seed"`
	Backend     string   `json:"backend"` // as asked: auto, cpu, nccl
	// IterStats is set when per-iteration timing was asked for.
	IterStats bool `json:"iter_stats,omitempty"`
	// CUDAGraph is the number of graph replays (0: no CUDA graphs).
	CUDAGraph int `json:"cuda_graph,omitempty"`
	// Agg is the operations issued per group call (-m); Blocking the
	// blocking mode (-z); Misalign the elements buffers are offset by (-u);
	// CPUTime reports host time (-C); Cycles the sweep repetitions (-N);
	// Register the buffer registration (-R: local, symmetric).
	Agg      int  `json:"agg,omitempty"`
	Blocking int  `json:"blocking,omitempty"`
	Misalign int  `json:"misalign,omitempty"`
	CPUTime  bool `json:"cpu_time,omitempty"`
	Cycles   int  `json:"cycles,omitempty"`
	// Stable: the sweep repeated until stable (--stable); Cycles is then
	// the bound while it runs and the cycles measured once it ends.
	Stable   bool   `json:"stable,omitempty"`
	Register string `json:"register,omitempty"`
	// Explain asks for the algorithm column (--explain).
	Explain bool `json:"explain,omitempty"`
	// Bitwise is the runs of each row compared bit for bit (--bitwise).
	Bitwise int `json:"bitwise,omitempty"`
	// Threads is how the process's GPUs issued their operations (the nccl
	// backend): per-gpu, a thread each, or one thread for all.
	Threads string `json:"threads,omitempty"`
	// Processes and Launcher are set when the ranks ran as separate processes.
	Processes int    `json:"processes,omitempty"`
	Launcher  string `json:"launcher,omitempty"`
	// RankList is the layout as given and Groups the groups it resolved to.
	RankList string  `json:"rank_list,omitempty"`
	Groups   [][]int `json:"groups,omitempty"`
}

// Environment is where the run happened.
type Environment struct {
	Host      string            `json:"host"`
	OS        string            `json:"os"`
	Arch      string            `json:"arch"`
	GoVersion string            `json:"go_version"`
	Backend   Backend           `json:"backend"`
	Env       map[string]string `json:"env,omitempty"` // NCCL_*, CUDA_*, UCX_* variables
	// HostLoad is the share of the host's CPU time that went to other
	// processes and to the hypervisor's steal while the rows were measured
	// (a run in one process, on Linux).
	HostLoad *hostload.Load `json:"host_load,omitempty"`
}

// Backend describes the backend that ran the collectives.
type Backend struct {
	Name        string `json:"name"`
	Reason      string `json:"reason,omitempty"` // why auto chose it
	Version     string `json:"version,omitempty"`
	VersionCode int    `json:"version_code,omitempty"`
	Library     string `json:"library,omitempty"`
	Driver      string `json:"driver,omitempty"`
	// Transport is what the library moves data with (the mpi backend:
	// Open MPI's pml/btl components and UCX).
	Transport string   `json:"transport,omitempty"`
	Devices   []Device `json:"devices,omitempty"`
}

// Device is what one local rank runs on.
type Device struct {
	Rank  int    `json:"rank"`
	Name  string `json:"name"`
	BusID string `json:"bus_id,omitempty"`
	// CPUs are the CPUs the rank's thread was bound to, those local to its
	// GPU (nccl backend), as a Linux CPU list.
	CPUs string `json:"cpus,omitempty"`
}

// Row is one size of one collective, type, op and root, with its
// out-of-place and in-place halves.
type Row struct {
	Collective string `json:"collective"`
	DType      string `json:"dtype"`
	Op         string `json:"op"`   // "none" for collectives without a reduction
	Root       int    `json:"root"` // -1 for collectives without a root
	SizeBytes  int64  `json:"size_bytes"`
	Count      int64  `json:"count"`
	Ranks      int    `json:"ranks"`
	// Layout is the rank list the row ran under; empty for all ranks.
	Layout string `json:"layout,omitempty"`
	// With a rank list of several groups, the halves are the aggregate over
	// groups (slowest group's time, summed bandwidth) and Groups holds each
	// group's own result.
	OutOfPlace *Half         `json:"out_of_place,omitempty"`
	InPlace    *Half         `json:"in_place,omitempty"`
	Groups     []GroupResult `json:"groups,omitempty"`
	// Algorithm is what the library chose for this row (--explain): NCCL's
	// algorithm, protocol and channels, or the cpu backend's algorithm.
	Algorithm *AlgoChoice `json:"algorithm,omitempty"`
}

// AlgoChoice is the algorithm a library ran a row with.
type AlgoChoice struct {
	Algo     string `json:"algo"`
	Proto    string `json:"proto,omitempty"`
	Channels string `json:"channels,omitempty"` // a range such as "0..15", or a count
	// Source says where the choice was read: NCCL's tuning log, or the
	// cpu backend itself.
	Source string `json:"source,omitempty"`
}

// String writes the choice compactly, e.g. RING/LL128/16ch.
func (a *AlgoChoice) String() string {
	if a == nil {
		return "-"
	}
	s := a.Algo
	if a.Proto != "" {
		s += "/" + a.Proto
	}
	if a.Channels != "" {
		var lo, hi int
		if n, _ := fmt.Sscanf(a.Channels, "%d..%d", &lo, &hi); n == 2 {
			s += fmt.Sprintf("/%dch", hi-lo+1)
		} else if n == 1 && fmt.Sprint(lo) == a.Channels {
			s += fmt.Sprintf("/%dch", lo)
		} else {
			s += "/" + a.Channels
		}
	}
	return s
}

// GroupResult is one group's share of a row.
type GroupResult struct {
	ID        int   `json:"id"`
	Ranks     []int `json:"ranks"` // world ranks, in group-rank order
	SizeBytes int64 `json:"size_bytes"`
	Count     int64 `json:"count"`
	// NoBandwidth marks groups of one rank: verified, but nothing crosses a link.
	NoBandwidth bool  `json:"no_bandwidth,omitempty"`
	OutOfPlace  *Half `json:"out_of_place,omitempty"`
	InPlace     *Half `json:"in_place,omitempty"`
	// Algorithm is what the library chose for this group's communicator.
	Algorithm *AlgoChoice `json:"algorithm,omitempty"`
}

// Halves returns the group's measured halves, out-of-place first.
func (g GroupResult) Halves() []*Half { return halves(g.OutOfPlace, g.InPlace) }

// CommInfo is what one rank sees of its communicator.
type CommInfo struct {
	WorldRank int    `json:"world_rank"`
	WorldSize int    `json:"world_size"`
	Rank      int    `json:"rank"`
	Size      int    `json:"size"`
	LocalRank int    `json:"local_rank"`
	LocalSize int    `json:"local_size"`
	GroupID   int    `json:"group_id"`
	GroupSize int    `json:"group_size"` // number of groups
	Host      string `json:"host"`
}

// Half is one mode's measurement.
type Half struct {
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbps"`
	BusBW  float64 `json:"busbw_gbps"`
	// Wrong is the number of wrong elements summed over ranks; nil when not checked.
	Wrong *int64 `json:"wrong"`
	// RankTimeUS is each rank's own time, in rank order.
	RankTimeUS []float64 `json:"rank_time_us,omitempty"`
	// Iter holds per-iteration statistics when they were measured.
	Iter *IterStats `json:"iter_stats,omitempty"`
	// RankBytesSent and RankBytesRecv are the bytes each rank sent and
	// received per operation over its links, headers included, in rank
	// order (the cpu backend across processes counts them).
	RankBytesSent []int64 `json:"rank_bytes_sent,omitempty"`
	RankBytesRecv []int64 `json:"rank_bytes_recv,omitempty"`
	// CPUTimeUS is the host time one operation took to issue (--cputime):
	// the timed loop's wall time before the final synchronisation.
	CPUTimeUS float64 `json:"cpu_time_us,omitempty"`
	// Cycles holds every cycle's measurement (--cycles): TimeUS, AlgBW
	// and BusBW are then their median.
	Cycles *CycleStats `json:"cycles,omitempty"`
	// Mismatches lists the first wrong elements found, for diagnosis.
	Mismatches []Mismatch `json:"mismatches,omitempty"`
	// Bitwise is what --bitwise found; nil where it did not run.
	Bitwise *Bitwise `json:"bitwise,omitempty"`
	// Kernels is what the library said about each rank's operation in one
	// untimed iteration of this half (NCCL's profiler plugin), in rank
	// order; nil where nothing was recorded.
	Kernels *KernelTimes `json:"kernels,omitempty"`
	// Spread and Runs are set in baselines: the relative half-range of the
	// runs' values around their median, and how many runs there were.
	Spread float64 `json:"spread,omitempty"`
	Runs   int     `json:"runs,omitempty"`
}

// KernelTimes are the ranks' kernel times on their GPUs' own clocks, for
// one operation, from the library (NCCL's profiler plugin): which rank's
// kernel started late, which ran long. Starts compare only as well as the
// GPUs' clocks agree: well within one host, roughly across hosts.
type KernelTimes struct {
	// DurationUS is each rank's kernel time, first channel's start to last
	// channel's stop; -1 where the rank recorded nothing.
	DurationUS []float64 `json:"duration_us"`
	// StartUS is each rank's start after the earliest rank's, every GPU's
	// timer aligned to its host's clock; -1 where nothing was recorded or
	// the clocks cannot be compared (ranks on different hosts, a timer that
	// could not be aligned).
	StartUS []float64 `json:"start_us"`
	// ClockErrorUS is how far each rank's aligned start may be off (half
	// the width of the bounds its GPU timer's offset is known within);
	// absent where no start could be aligned.
	ClockErrorUS []float64 `json:"clock_error_us,omitempty"`
	// EnqueueUS is each rank's call of the operation after the earliest
	// rank's, on the host's clock (no GPU timer in it): a late start with
	// an early call was late on the GPU or its timer's alignment, not in
	// the issuing; -1 where unknown, absent where the clocks differ.
	EnqueueUS []float64 `json:"enqueue_us,omitempty"`
	// Channels is how many channels each rank's kernel ran on.
	Channels []int `json:"channels"`
	// Net is each rank's network steps per peer, through NCCL's proxy
	// (between hosts); omitted when no rank had any.
	Net    [][]NetSteps `json:"net,omitempty"`
	Source string       `json:"source"`
}

// NetSteps sums one rank's network steps with one peer in one direction
// during one operation.
type NetSteps struct {
	Peer  int   `json:"peer"` // rank in the communicator
	Send  bool  `json:"send"`
	Steps int   `json:"steps"`
	Bytes int64 `json:"bytes"`
	// BusyUS is the steps' summed time, MaxStepUS the longest (host clock).
	BusyUS    float64 `json:"busy_us"`
	MaxStepUS float64 `json:"max_step_us"`
	// WireUS is how long at least one send step was on the wire (handed
	// to the network until it said done): Bytes/WireUS is the path's rate
	// as this collective saw it. PeerWaitUS is their time ready but waiting
	// for the peer's buffer. Both 0 for receives.
	WireUS     float64 `json:"wire_us,omitempty"`
	PeerWaitUS float64 `json:"peer_wait_us,omitempty"`
}

// OpRecord is what a library recorded of one rank's operation.
type OpRecord struct {
	Algorithm *AlgoChoice `json:"a,omitempty"`
	// StartNS and StopNS are on the rank's GPU clock; Channels counts the
	// channels that reported.
	StartNS  uint64 `json:"s,omitempty"`
	StopNS   uint64 `json:"e,omitempty"`
	Channels int    `json:"c,omitempty"`
	// ClockLoNS and ClockHiNS bound the GPU clock's offset from the host's
	// (host minus GPU, ns), both 0 where unknown; Clock names the host
	// clock they refer to (its boot id): offsets on different clocks do
	// not compare.
	ClockLoNS int64      `json:"lo,omitempty"`
	ClockHiNS int64      `json:"hi,omitempty"`
	Clock     string     `json:"k,omitempty"`
	Net       []NetSteps `json:"n,omitempty"`
	// EnqueueNS is when the rank's first operation was called, on the
	// host clock Clock names (ns); 0 where unknown.
	EnqueueNS uint64 `json:"q,omitempty"`
}

// Mismatch is one output element that differed from its expected value.
// Values are text so NaN and infinities survive JSON.
type Mismatch struct {
	Rank  int    `json:"rank"`
	Index int64  `json:"index"`
	Want  string `json:"want"`
	Got   string `json:"got"`
}

// CycleStats are a row's measurements over repeated cycles of the sweep.
type CycleStats struct {
	N         int       `json:"n"`
	TimesUS   []float64 `json:"times_us"` // every cycle's time, in cycle order
	TimeMinUS float64   `json:"time_min_us"`
	TimeMaxUS float64   `json:"time_max_us"`
	BusBWMin  float64   `json:"busbw_min_gbps"`
	BusBWMax  float64   `json:"busbw_max_gbps"`
}

// Spread is the relative half-range of the cycles around their median.
func (c *CycleStats) Spread(median float64) float64 {
	if c == nil || c.N < 2 || median <= 0 {
		return 0
	}
	return (c.TimeMaxUS - c.TimeMinUS) / 2 / median
}

// MemoryReport is what the run used (--memory): what the communicators
// took when created, the buffers the run allocated, and what the
// collectives took on top while running (device memory on GPUs).
type MemoryReport struct {
	LibraryBytes    int64  `json:"library_bytes"`
	BufferBytes     int64  `json:"buffer_bytes"`
	CollectiveBytes int64  `json:"collective_bytes"`
	Note            string `json:"note,omitempty"`
}

// IterStats summarises per-iteration times (µs): each iteration's time is
// the mean over ranks of that iteration's own timing.
type IterStats struct {
	Samples int     `json:"samples"`
	MinUS   float64 `json:"min_us"`
	MaxUS   float64 `json:"max_us"`
	P50US   float64 `json:"p50_us"`
	P99US   float64 `json:"p99_us"`
	MeanUS  float64 `json:"mean_us"`
	// CV is the coefficient of variation: standard deviation / mean.
	CV float64 `json:"cv"`
}

// Halves returns the row's measured halves, out-of-place first.
func (r Row) Halves() []*Half { return halves(r.OutOfPlace, r.InPlace) }

// OneRank reports a row in which nothing crossed a link: measured on a
// world of one rank, or under a rank list whose every group is one rank
// (halves of 2 GPUs). It has no share of a link peak.
func (r Row) OneRank() bool {
	if r.Ranks == 1 {
		return true
	}
	if len(r.Groups) == 0 {
		return false
	}
	for _, g := range r.Groups {
		if !g.NoBandwidth {
			return false
		}
	}
	return true
}

// halves lists the halves that were measured.
func halves(hs ...*Half) []*Half {
	var out []*Half
	for _, h := range hs {
		if h != nil {
			out = append(out, h)
		}
	}
	return out
}

// Summary totals a run.
type Summary struct {
	Rows       int                 `json:"rows"`
	WrongTotal int64               `json:"wrong_total"`
	AvgBusBW   float64             `json:"avg_busbw_gbps"`
	OK         bool                `json:"ok"`
	PerColl    []CollectiveSummary `json:"collectives,omitempty"`
	// BitsDiffer counts the halves whose bits differed under --bitwise.
	BitsDiffer int `json:"bitwise_differ,omitempty"`
}

// CollectiveSummary totals one collective's rows.
type CollectiveSummary struct {
	Collective string  `json:"collective"`
	Rows       int     `json:"rows"`
	WrongTotal int64   `json:"wrong_total"`
	AvgBusBW   float64 `json:"avg_busbw_gbps"`
	BitsDiffer int     `json:"bitwise_differ,omitempty"`
}

// Summarize computes the totals of rows. The average bus bandwidth is the
// mean over every measured half, as NCCL's benchmark reports it.
func Summarize(rows []Row, failed bool) Summary {
	s := Summary{Rows: len(rows)}
	var sum float64
	var halves int
	idx := map[string]int{}
	type acc struct {
		sum    float64
		halves int
	}
	var accs []acc
	for _, r := range rows {
		i, ok := idx[r.Collective]
		if !ok {
			i = len(s.PerColl)
			idx[r.Collective] = i
			s.PerColl = append(s.PerColl, CollectiveSummary{Collective: r.Collective})
			accs = append(accs, acc{})
		}
		s.PerColl[i].Rows++
		s.BitsDiffer += bitsDiffer(r)
		s.PerColl[i].BitsDiffer += bitsDiffer(r)
		for _, h := range r.Halves() {
			if h.Wrong != nil {
				s.WrongTotal += *h.Wrong
				s.PerColl[i].WrongTotal += *h.Wrong
			}
			sum += h.BusBW
			halves++
			accs[i].sum += h.BusBW
			accs[i].halves++
		}
	}
	if halves > 0 {
		s.AvgBusBW = sum / float64(halves)
	}
	for i := range s.PerColl {
		if accs[i].halves > 0 {
			s.PerColl[i].AvgBusBW = accs[i].sum / float64(accs[i].halves)
		}
	}
	s.OK = s.WrongTotal == 0 && s.BitsDiffer == 0 && !failed
	return s
}

// Write encodes d as indented JSON.
func Write(w io.Writer, d *Document) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// ErrNotResult is returned by Read for JSON that is not a collbench result.
var ErrNotResult = errors.New("not a collbench result document")

// Read decodes a result document and checks its schema and version.
func Read(r io.Reader) (*Document, error) {
	var d Document
	dec := json.NewDecoder(r)
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("reading a collbench result: %s", jsonProblem(err))
	}
	if d.Schema != Schema {
		return nil, fmt.Errorf("%w (schema %q)", ErrNotResult, d.Schema)
	}
	if d.SchemaVersion < 1 || d.SchemaVersion > SchemaVersion {
		return nil, fmt.Errorf("result schema version %d is not supported (this collbench reads 1 to %d)", d.SchemaVersion, SchemaVersion)
	}
	if err := d.CheckRows(); err != nil {
		return nil, err
	}
	if d.Config.Cycles > 1 {
		d.Results = latestCycles(&d)
	}
	return &d, nil
}

// CheckRows refuses a row holding a value no run can produce (a negative
// size, count or time; a bandwidth that is negative or not a number; no
// ranks; a negative count of wrong elements), naming the row: compared
// or reported, it reads as a measurement ("-8 B", new).
func (d *Document) CheckRows() error {
	for i, r := range d.Results {
		where := fmt.Sprintf("row %d (%s %s)", i+1, r.Collective, r.DType)
		bad := func(field string, v any) error {
			return fmt.Errorf("%s: %s %v is not a value any run writes; the file was changed by hand or is damaged", where, field, v)
		}
		switch {
		case r.SizeBytes < 0:
			return bad("size_bytes", r.SizeBytes)
		case r.Count < 0:
			return bad("count", r.Count)
		case r.Ranks < 0:
			return bad("ranks", r.Ranks)
		}
		for _, h := range r.Halves() {
			for _, f := range []struct {
				name string
				v    float64
			}{{"time_us", h.TimeUS}, {"algbw_gbps", h.AlgBW}, {"busbw_gbps", h.BusBW}} {
				if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
					return bad(f.name, f.v)
				}
			}
			if h.Wrong != nil && *h.Wrong < 0 {
				return bad("wrong", *h.Wrong)
			}
		}
	}
	return nil
}

// latestCycles repairs the files of --cycles written by earlier versions,
// which added a row once more after every cycle: of the copies of a row it
// keeps the one with the most cycles, where the first copy stood. Copies
// with as many cycles are kept, for compare to report.
func latestCycles(d *Document) []Row {
	cycles := func(r Row) int {
		n := 0
		for _, h := range []*Half{r.OutOfPlace, r.InPlace} {
			if h != nil && h.Cycles != nil {
				n = max(n, h.Cycles.N)
			}
		}
		return n
	}
	at := map[string]int{}
	var out []Row
	for _, r := range d.Results {
		k := RowKey(d, r)
		i, seen := at[k]
		switch {
		case seen && cycles(r) > cycles(out[i]):
			out[i] = r // the same row after more cycles
		case seen && cycles(r) < cycles(out[i]):
			// an earlier copy: the later one has it all
		default:
			// a new row, or a true repeat, which compare reports
			if !seen {
				at[k] = len(out)
			}
			out = append(out, r)
		}
	}
	return out
}
