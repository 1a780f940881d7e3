package results

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"collbench/internal/bounded"
	"collbench/internal/jsonwords"
)

// NCCLTestsVersion is the JSON format version of NCCL's benchmark (-J) this
// package reads.
const NCCLTestsVersion = 3

// ReadPath reads the results file a user named (ReadNamed), with a bound
// on its size; a signal (ctx's end) stops a wait on a pipe or device at
// once. Errors name the file: "cannot read PATH: ..." or "PATH: ...".
func ReadPath(ctx context.Context, path string) (*Document, error) {
	fh, release, err := bounded.Open(ctx, path)
	var stopped *bounded.StoppedError
	switch {
	case errors.As(err, &stopped):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("cannot read %s: %v", path, err)
	}
	defer release()
	d, err := ReadNamed(fh, path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &bounded.StoppedError{Path: path}
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return d, nil
}

// ReadAny reads a collbench result document, the JSON output of NCCL's
// standard benchmark (format version 3) or its text output, converted to a
// result document.
func ReadAny(r io.Reader) (*Document, error) { return ReadNamed(r, "") }

// Expected says what a results file may hold, for errors.
const Expected = "a collbench result (JSON), NCCL benchmark JSON (-J) or NCCL benchmark text output"

// ReadNamed is ReadAny for a file of the given name: the text output of old
// versions of NCCL's benchmark does not name its collective, and the file
// name (all_reduce_perf.log) then tells it.
func ReadNamed(r io.Reader, name string) (*Document, error) {
	data, err := bounded.Read(r, orWord(name, "the input"), bounded.Results)
	if err != nil {
		var big *bounded.TooLargeError
		if errors.As(err, &big) {
			return nil, err
		}
		return nil, fmt.Errorf("reading: %w", err)
	}
	t := bytes.TrimSpace(data)
	switch {
	case len(t) == 0:
		return nil, fmt.Errorf("%w: the file is empty; expected %s", ErrNotResult, Expected)
	case t[0] == '[':
		return nil, fmt.Errorf("%w: the file holds a JSON list; expected %s", ErrNotResult, Expected)
	case t[0] != '{':
		if looksLikeNCCLTestsText(t) {
			return checked(readNCCLTestsText(t, name))
		}
		first, _, _ := strings.Cut(string(t), "\n")
		if len(first) > 40 {
			first = first[:40] + "..."
		}
		return nil, fmt.Errorf("%w: it starts with %q; expected %s", ErrNotResult, first, Expected)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotResult, jsonProblem(err))
	}
	if _, ok := probe["schema"]; ok {
		return Read(bytes.NewReader(data))
	}
	if _, ok := probe["results"]; ok {
		if _, ok := probe["version"]; ok {
			return checked(readNCCLTests(data))
		}
	}
	return nil, fmt.Errorf("%w: a JSON object without \"schema\" (collbench) or \"version\" and \"results\" (NCCL's benchmark); expected %s", ErrNotResult, Expected)
}

// checked is a converted document whose rows are range-checked as a
// collbench file's are.
func checked(d *Document, err error) (*Document, error) {
	if err != nil {
		return nil, err
	}
	if err := d.CheckRows(); err != nil {
		return nil, err
	}
	return d, nil
}

func orWord(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// SameRun says whether a and b hold one run: the same rows, measured at
// the same start on the same host by the same tool (a benchmark log has no
// start: its rows alone tell).
func SameRun(a, b *Document) bool {
	if !a.Started.Equal(b.Started) || a.Environment.Host != b.Environment.Host || a.Tool != b.Tool || len(a.Results) != len(b.Results) {
		return false
	}
	ja, err1 := json.Marshal(a.Results)
	jb, err2 := json.Marshal(b.Results)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// runWords names a run for people: when and where it started.
func runWords(d *Document) string {
	if d.Started.IsZero() {
		return fmt.Sprintf("the same %d rows", len(d.Results))
	}
	host := d.Environment.Host
	if host == "" {
		host = "an unnamed host"
	}
	return fmt.Sprintf("started %s on %s", d.Started.UTC().Format("2006-01-02 15:04:05Z"), host)
}

// jsonProblem says in a reader's words what is wrong with a JSON text.
func jsonProblem(err error) string { return jsonwords.Problem(err) }

type ncclTestsHalf struct {
	Time    *float64 `json:"time"`
	CPUTime *float64 `json:"cpu_time"`
	AlgBW   float64  `json:"alg_bw"`
	BusBW   float64  `json:"bus_bw"`
	NWrong  *float64 `json:"nwrong"`
}

type ncclTestsPerIter struct {
	MinUS *float64  `json:"min_us"`
	MaxUS float64   `json:"max_us"`
	AvgUS float64   `json:"avg_us"`
	P50US float64   `json:"p50_us"`
	P99US float64   `json:"p99_us"`
	CVPct float64   `json:"cv_pct"`
	Times []float64 `json:"times_us"`
}

type ncclTestsDoc struct {
	Version     int      `json:"version"`
	Args        []string `json:"args"`
	NCCLVersion int      `json:"nccl_version"`
	Config      struct {
		Iterations  int `json:"iterations"`
		WarmupIters int `json:"warmup_iters"`
		Validation  int `json:"validation"`
		NThreads    int `json:"nthreads"`
		NGPUs       int `json:"ngpus"`
		Devices     []struct {
			Rank       int    `json:"rank"`
			Hostname   string `json:"hostname"`
			DeviceHex  string `json:"device_hex"`
			DeviceInfo string `json:"device_info"`
		} `json:"devices"`
	} `json:"config"`
	Results []struct {
		Size           int64             `json:"size"`
		Count          int64             `json:"count"`
		Type           string            `json:"type"`
		Redop          string            `json:"redop"`
		Root           string            `json:"root"`
		OutOfPlace     *ncclTestsHalf    `json:"out_of_place"`
		InPlace        *ncclTestsHalf    `json:"in_place"`
		OutOfPlaceIter *ncclTestsPerIter `json:"out_of_place_per_iter"`
		InPlaceIter    *ncclTestsPerIter `json:"in_place_per_iter"`
		Experiment     string            `json:"experiment_name"`
	} `json:"results"`
	StartTime string `json:"start_time"`
}

// ncclTestsCollective maps a benchmark program or experiment name
// (all_reduce_perf, AllReduce) to a collective name.
func ncclTestsCollective(names ...string) string {
	table := map[string]string{
		"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce-scatter",
		"broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
		"gather": "gather", "scatter": "scatter", "hypercube": "hypercube", "alltoallv": "alltoallv",
	}
	for _, n := range names {
		k := strings.ToLower(filepath.Base(n))
		k = strings.TrimSuffix(k, "_perf_mpi")
		k = strings.TrimSuffix(k, "_perf")
		k = strings.NewReplacer("_", "", "-", "").Replace(k)
		if c, ok := table[k]; ok {
			return c
		}
	}
	return ""
}

// readNCCLTests converts the JSON output of NCCL's benchmark (-J, format
// version 3) into a result document.
func readNCCLTests(data []byte) (*Document, error) {
	var nt ncclTestsDoc
	if err := json.Unmarshal(data, &nt); err != nil {
		return nil, fmt.Errorf("reading NCCL benchmark JSON: %s", jsonProblem(err))
	}
	if nt.Version != NCCLTestsVersion {
		return nil, fmt.Errorf("NCCL benchmark JSON format version %d is not supported (collbench reads version %d)", nt.Version, NCCLTestsVersion)
	}
	prog := ""
	if len(nt.Args) > 0 {
		prog = nt.Args[0]
	}
	d := &Document{Schema: Schema, SchemaVersion: SchemaVersion, Tool: Tool{Name: "nccl-tests", Version: "json v3"},
		Command: nt.Args}
	d.Config.Iters, d.Config.Warmup, d.Config.Check = nt.Config.Iterations, nt.Config.WarmupIters, nt.Config.Validation
	d.Config.Mode, d.Config.Average, d.Config.Backend, d.Config.Root = "both", "mean", "nccl", "0"
	ranks := len(nt.Config.Devices)
	if ranks == 0 {
		ranks = max(nt.Config.NThreads*nt.Config.NGPUs, 1)
	}
	d.Config.Ranks = ranks
	d.Environment.Backend = Backend{Name: "nccl", VersionCode: nt.NCCLVersion}
	if nt.NCCLVersion > 0 {
		d.Environment.Backend.Version = fmt.Sprintf("%d.%d.%d", nt.NCCLVersion/10000, nt.NCCLVersion%10000/100, nt.NCCLVersion%100)
	}
	for _, dev := range nt.Config.Devices {
		d.Environment.Backend.Devices = append(d.Environment.Backend.Devices, Device{Rank: dev.Rank, Name: dev.DeviceInfo, BusID: dev.DeviceHex})
		if d.Environment.Host == "" {
			d.Environment.Host = dev.Hostname
		}
	}
	seen := map[string]bool{}
	half := func(h *ncclTestsHalf, it *ncclTestsPerIter) *Half {
		if h == nil {
			return nil
		}
		out := &Half{AlgBW: h.AlgBW, BusBW: h.BusBW}
		switch {
		case h.Time != nil:
			out.TimeUS = *h.Time
		case h.CPUTime != nil:
			out.TimeUS = *h.CPUTime
		}
		if h.NWrong != nil {
			w := int64(*h.NWrong)
			out.Wrong = &w
		}
		if it != nil && it.MinUS != nil {
			out.Iter = &IterStats{Samples: len(it.Times), MinUS: *it.MinUS, MaxUS: it.MaxUS, P50US: it.P50US,
				P99US: it.P99US, MeanUS: it.AvgUS, CV: it.CVPct / 100}
		}
		return out
	}
	for i, r := range nt.Results {
		coll := ncclTestsCollective(r.Experiment, prog)
		if coll == "" {
			return nil, fmt.Errorf("NCCL benchmark JSON: result %d: cannot tell the collective from %q or %q", i, r.Experiment, prog)
		}
		root, err := strconv.Atoi(strings.TrimSpace(r.Root))
		if err != nil {
			root = -1
		}
		row := Row{Collective: coll, DType: r.Type, Op: r.Redop, Root: root, SizeBytes: r.Size, Count: r.Count, Ranks: ranks,
			OutOfPlace: half(r.OutOfPlace, r.OutOfPlaceIter), InPlace: half(r.InPlace, r.InPlaceIter)}
		if row.Op == "" {
			row.Op = "none"
		}
		if row.OutOfPlace == nil && row.InPlace == nil {
			continue
		}
		d.Results = append(d.Results, row)
		if !seen[coll] {
			seen[coll] = true
			d.Config.Collectives = append(d.Config.Collectives, coll)
		}
	}
	d.Summary = Summarize(d.Results, false)
	return d, nil
}

// MakeBaseline combines several runs of the same suite into one document:
// each row's time and bandwidths are the median over the runs that have it,
// and Spread keeps their relative spread, so comparisons can tell noise
// from regressions. The first run provides the configuration and environment.
func MakeBaseline(runs []*Document) (*Document, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("no runs to make a baseline from")
	}
	for i := range runs {
		for j := 0; j < i; j++ {
			if SameRun(runs[i], runs[j]) {
				return nil, fmt.Errorf("runs %d and %d are the same run (%s): a baseline needs distinct runs, or it counts one run twice", j+1, i+1, runWords(runs[i]))
			}
		}
	}
	first := runs[0]
	for i, r := range runs {
		if a, b := first.Machine(), r.Machine(); a != "" && b != "" && a != b {
			return nil, fmt.Errorf("runs 1 and %d come from different machines (%s, and %s): a baseline is of one machine; make one per machine", i+1, a, b)
		}
		if a, b := first.Topology, r.Topology; a != nil && b != nil && a.Fingerprint != "" && b.Fingerprint != "" && a.Fingerprint != b.Fingerprint {
			return nil, fmt.Errorf("runs 1 and %d come from machines of different shapes (%s, and %s): a baseline is of one machine; make one per machine", i+1, a.Summary, b.Summary)
		}
	}
	base := *runs[0]
	base.Results = nil
	type acc struct {
		row   Row
		halfs [2][]*Half
	}
	var order []string
	byKey := map[string]*acc{}
	for _, d := range runs {
		for _, r := range d.Results {
			k := RowKey(d, r)
			a, ok := byKey[k]
			if !ok {
				a = &acc{row: r}
				byKey[k] = a
				order = append(order, k)
			}
			if r.OutOfPlace != nil {
				a.halfs[0] = append(a.halfs[0], r.OutOfPlace)
			}
			if r.InPlace != nil {
				a.halfs[1] = append(a.halfs[1], r.InPlace)
			}
		}
	}
	for _, k := range order {
		a := byKey[k]
		r := a.row
		r.Groups = nil
		r.OutOfPlace, r.InPlace = medianHalf(a.halfs[0]), medianHalf(a.halfs[1])
		base.Results = append(base.Results, r)
	}
	base.Baseline = &BaselineInfo{Runs: len(runs)}
	for _, d := range runs {
		base.Baseline.Started = append(base.Baseline.Started, d.Started)
	}
	base.Summary = Summarize(base.Results, false)
	base.Error = ""
	return &base, nil
}

// medianHalf merges one size's measurements (several runs of a baseline,
// or -N cycles of a log) into the median's half, with their spread.
func medianHalf(hs []*Half) *Half {
	if len(hs) == 0 {
		return nil
	}
	// A run of several cycles contributes every cycle, so one run of
	// --cycles N spreads like N runs.
	type sample struct{ time, algbw, busbw float64 }
	var all []sample
	for _, h := range hs {
		if c := h.Cycles; c != nil && len(c.TimesUS) > 0 && h.TimeUS > 0 {
			for _, t := range c.TimesUS {
				if t > 0 {
					all = append(all, sample{t, h.AlgBW * h.TimeUS / t, h.BusBW * h.TimeUS / t})
				}
			}
			continue
		}
		all = append(all, sample{h.TimeUS, h.AlgBW, h.BusBW})
	}
	pick := func(get func(sample) float64) (float64, float64) {
		v := make([]float64, len(all))
		for i, x := range all {
			v[i] = get(x)
		}
		sort.Float64s(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		spread := 0.0
		if med > 0 && len(v) > 1 {
			spread = (v[len(v)-1] - v[0]) / 2 / med
		}
		return med, spread
	}
	out := &Half{}
	var s1, s2 float64
	out.TimeUS, s1 = pick(func(x sample) float64 { return x.time })
	out.AlgBW, _ = pick(func(x sample) float64 { return x.algbw })
	out.BusBW, s2 = pick(func(x sample) float64 { return x.busbw })
	out.Spread = math.Max(s1, s2)
	out.Runs = len(hs)
	// Each run's own time, in run order, as the baseline's cycles: how far
	// the runs moved together (a host whose speed changes between runs) is
	// then measured over a band of rows, as a run's cycles are.
	if len(hs) > 1 {
		out.Cycles = runTimes(hs)
	}
	var wrong int64
	checked := false
	for _, h := range hs {
		if h.Wrong != nil {
			checked = true
			wrong += *h.Wrong
		}
	}
	if checked {
		out.Wrong = &wrong
	}
	return out
}

// runTimes is each half's time, in order, as cycle statistics.
func runTimes(hs []*Half) *CycleStats {
	c := &CycleStats{N: len(hs), TimeMinUS: math.Inf(1), BusBWMin: math.Inf(1)}
	for _, h := range hs {
		c.TimesUS = append(c.TimesUS, h.TimeUS)
		c.TimeMinUS, c.TimeMaxUS = math.Min(c.TimeMinUS, h.TimeUS), math.Max(c.TimeMaxUS, h.TimeUS)
		c.BusBWMin, c.BusBWMax = math.Min(c.BusBWMin, h.BusBW), math.Max(c.BusBWMax, h.BusBW)
	}
	return c
}

// RowKey identifies a row across runs: collective, type, op, root, group
// layout and size.
func RowKey(d *Document, r Row) string {
	layout := "all"
	switch {
	case r.Layout != "":
		layout = r.Layout
	case d != nil && len(d.Config.Groups) > 1:
		layout = d.Config.RankList
	}
	return fmt.Sprintf("%s|%s|%s|%d|%s|%d", r.Collective, r.DType, r.Op, r.Root, layout, r.SizeBytes)
}
