package results

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readTestdata reads testdata/name with read, failing the test on an error.
func readTestdata(t *testing.T, name string, read func(io.Reader) (*Document, error)) *Document {
	t.Helper()
	fh, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	d, err := read(fh)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReadNCCLTestsV3(t *testing.T) {
	d := readTestdata(t, "nccl-tests-v3.json", ReadAny)
	if d.Tool.Name != "nccl-tests" || d.Config.Ranks != 4 || d.Environment.Backend.Version != "2.28.3" || d.Environment.Host != "gpu-a" {
		t.Fatalf("%+v %+v", d.Tool, d.Environment)
	}
	if len(d.Results) != 3 || d.Results[0].Collective != "allreduce" || d.Results[0].Root != -1 || d.Results[2].SizeBytes != 64<<20 {
		t.Fatalf("%+v", d.Results)
	}
	r := d.Results[2]
	if r.OutOfPlace.BusBW != 314.1 || r.InPlace.TimeUS != 321 || r.OutOfPlace.Iter == nil || r.OutOfPlace.Iter.CV != 0.01 {
		t.Fatalf("%+v %+v", r.OutOfPlace, r.InPlace)
	}
	if d.Results[1].InPlace.Wrong != nil || *d.Results[1].OutOfPlace.Wrong != 0 {
		t.Fatal("nwrong null and 0 must stay distinct")
	}
}

func TestReadAnyRejects(t *testing.T) {
	cases := map[string]string{
		`{"version": 2, "results": []}`: "format version 2 is not supported",
		`{"something": "else"}`:         "a JSON object without \"schema\"",
		`[1, 2, 3]`:                     "the file holds a JSON list",
		``:                              "the file is empty",
		"# a note\nnothing":             "it starts with \"# a note\"",
		`{"schema": "collbench/result", "results": "x"}`:                                                                     "field \"results\" holds a JSON string where a list belongs",
		`{"schema": "collbench/result", "schema_version": 1, "results": [{"size_bytes": "8"}]}`:                              "holds a JSON string where a whole number belongs",
		`{"schema": "collbench/result", "schema_version": 1, "results": [`:                                                   "the JSON ends early",
		`{"schema": "collbench/result" "x": 1}`:                                                                              "not valid JSON at byte",
		`{"schema": "collbench/result", "schema_version": 7}`:                                                                "schema version 7",
		`{"version": 3, "args": ["./mystery_perf"], "results": [{"size": 8, "type": "float", "out_of_place": {"time": 1}}]}`: "cannot tell the collective",
	}
	for in, want := range cases {
		_, err := ReadAny(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadAny(%s) = %v, want %q", in, err, want)
		}
		if err != nil && goInternals.MatchString(err.Error()) {
			t.Errorf("ReadAny(%s): %q names Go internals", in, err)
		}
	}
}

// goInternals matches what a user must never read: Go type and package
// names, strconv's and encoding/json's own words.
var goInternals = regexp.MustCompile(`strconv\.|json\.|[a-z]+\.[A-Z][a-z]+|map\[|\[\]|Go (value|struct)|of type|reflect|unmarshal`)

// TestReadNCCLTestsText reads the text output of NCCL's benchmark: a new
// version over 8 processes on 2 hosts with NCCL's log lines mixed in; an
// old version without version, collective or root column, its collective
// told by the file name; and a run of 3 cycles (-N) with CUDA graphs, -m
// and no check, whose repeated sizes become rows of cycles.
func TestReadNCCLTestsText(t *testing.T) {
	named := func(name string) func(io.Reader) (*Document, error) {
		return func(r io.Reader) (*Document, error) { return ReadNamed(r, name) }
	}
	d := readTestdata(t, "nccl-tests-2.17-allreduce-8ranks.txt", ReadAny)
	if d.Tool.Name != "nccl-tests" || d.Tool.Version != "text 2.17.6" || d.Config.Ranks != 8 || d.Environment.Backend.Version != "2.28.3" ||
		d.Environment.Host != "gpu-a" || len(d.Environment.Backend.Devices) != 8 || d.Environment.Backend.Devices[7].BusID != "0000:1f:00" {
		t.Fatalf("%+v %+v %+v", d.Tool, d.Config, d.Environment)
	}
	if len(d.Results) != 13 || d.Results[0].Collective != "allreduce" || d.Results[0].DType != "float" || d.Results[0].Op != "sum" || d.Results[0].Root != -1 {
		t.Fatalf("%d rows: %+v", len(d.Results), d.Results[0])
	}
	last := d.Results[12]
	if last.SizeBytes != 128<<20 || last.Count != 32<<20 || last.OutOfPlace.TimeUS != 81234 || last.InPlace == nil || *last.OutOfPlace.Wrong != 0 {
		t.Fatalf("%+v %+v", last, last.OutOfPlace)
	}
	if d.Config.Iters != 20 || d.Config.Warmup != 5 || d.Config.Check != 1 {
		t.Fatalf("%+v", d.Config)
	}

	if _, err := ReadAny(mustOpen(t, "all_gather_perf.log")); err == nil || !strings.Contains(err.Error(), "name the file after the benchmark") {
		t.Fatalf("an old log of no name: %v", err)
	}
	d = readTestdata(t, "all_gather_perf.log", named("logs/all_gather_perf.log"))
	if len(d.Results) != 11 || d.Results[0].Collective != "allgather" || d.Config.Ranks != 4 || d.Results[0].Root != -1 ||
		d.Results[10].SizeBytes != 1<<20 || d.Results[0].OutOfPlace.Wrong != nil || d.Results[0].InPlace.BusBW != 0.04 {
		t.Fatalf("%+v %+v", d.Config, d.Results[0])
	}

	// hypercube_perf leaves the operation column blank (4x H200, 2.19.6).
	d = readTestdata(t, "nccl-tests-2.19-hypercube-blank-redop.txt", ReadAny)
	if len(d.Results) != 10 || len(d.Unread) != 0 || d.Results[0].Collective != "hypercube" || d.Results[9].SizeBytes != 1<<30 ||
		d.Results[9].OutOfPlace.TimeUS != 2552.12 || d.Results[9].InPlace.BusBW != 332.66 || d.Results[9].Root != -1 {
		t.Fatalf("%d rows, unread lines %v: %+v", len(d.Results), d.Unread, d.Results)
	}

	d = readTestdata(t, "nccl-tests-2.19-sendrecv-cycles.txt", ReadAny)
	if len(d.Results) != 3 || d.Config.Cycles != 3 || d.Config.Agg != 4 || d.Config.CUDAGraph != 10 || d.Config.Check != 0 || d.Config.Ranks != 2 {
		t.Fatalf("%+v, %d rows", d.Config, len(d.Results))
	}
	h := d.Results[0].OutOfPlace
	if h.Cycles == nil || h.Cycles.N != 3 || h.TimeUS != 11 || h.Cycles.TimeMinUS != 11*0.97 || h.Cycles.TimeMaxUS != 11*1.06 || h.Wrong != nil {
		t.Fatalf("%+v %+v", h, h.Cycles)
	}
}

func mustOpen(t *testing.T, name string) io.Reader {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

func half(t, bw float64) *Half { return &Half{TimeUS: t, BusBW: bw, AlgBW: bw / 1.5} }

func TestMakeBaselineMedianAndSpread(t *testing.T) {
	mk := func(t0, bw float64) *Document {
		return &Document{Schema: Schema, SchemaVersion: 1, Started: time.Unix(int64(t0), 0),
			Results: []Row{{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 1 << 20, OutOfPlace: half(t0, bw)}}}
	}
	b, err := MakeBaseline([]*Document{mk(10, 100), mk(12, 90), mk(11, 110)})
	if err != nil {
		t.Fatal(err)
	}
	h := b.Results[0].OutOfPlace
	if h.TimeUS != 11 || h.BusBW != 100 || h.Runs != 3 || h.Spread != 0.1 || b.Baseline.Runs != 3 {
		t.Fatalf("%+v %+v", h, b.Baseline)
	}
	var buf bytes.Buffer
	if err := Write(&buf, b); err != nil {
		t.Fatal(err)
	}
	if back, err := Read(&buf); err != nil || back.Results[0].OutOfPlace.Spread != 0.1 {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := MakeBaseline(nil); err == nil {
		t.Fatal("empty baseline accepted")
	}
}

// TestMakeBaselineFromCycles: one run of --cycles N counts as N samples,
// so a baseline from it carries the cycles' median and spread.
func TestMakeBaselineFromCycles(t *testing.T) {
	h := half(10, 100) // the median cycle
	h.Cycles = &CycleStats{N: 5, TimesUS: []float64{9, 10, 10, 11, 12.5}, TimeMinUS: 9, TimeMaxUS: 12.5}
	d := &Document{Schema: Schema, SchemaVersion: 1,
		Results: []Row{{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 1 << 20, OutOfPlace: h}}}
	b, err := MakeBaseline([]*Document{d})
	if err != nil {
		t.Fatal(err)
	}
	got := b.Results[0].OutOfPlace
	if got.TimeUS != 10 || got.BusBW != 100 || got.Runs != 1 {
		t.Fatalf("median %+v", got)
	}
	// Times spread (12.5-9)/2/10 = 17.5%; bandwidth (1000/9-1000/12.5)/2/100 = 15.6%.
	if got.Spread < 0.174 || got.Spread > 0.176 {
		t.Fatalf("spread %v, want 0.175", got.Spread)
	}
}

// FuzzReadAny feeds arbitrary bytes to the result readers (collbench and
// NCCL benchmark JSON): they may refuse, never panic.
func FuzzReadAny(f *testing.F) {
	seed, _ := os.ReadFile("testdata/nccl-tests-v3.json")
	f.Add(seed)
	f.Add([]byte(`{"schema":"collbench/result","schema_version":1,"results":[{"collective":"allreduce","out_of_place":{"time_us":1}}]}`))
	f.Add([]byte(`{"version":3,"results":[{"size":-1,"root":"x","out_of_place":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ReadAny(bytes.NewReader(data))
		if err == nil {
			Summarize(d.Results, false)
			for _, r := range d.Results {
				RowKey(d, r)
			}
		}
	})
}

// TestEncoderSetReplacesOrAppends: a row set again replaces the one at its
// index, a row set at the end is added, and an index beyond the end is an
// error that changes nothing.
func TestEncoderSetReplacesOrAppends(t *testing.T) {
	var e Encoder
	row := func(size int64) Row { return Row{Collective: "allreduce", SizeBytes: size, Root: -1} }
	for i, size := range []int64{8, 16} {
		if err := e.Set(i, row(size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Set(0, row(32)); err != nil {
		t.Fatal(err)
	}
	if err := e.Set(3, row(64)); err == nil {
		t.Error("row 3 of 2 was accepted")
	}
	var b bytes.Buffer
	if err := e.Write(&b, &Document{Schema: Schema, SchemaVersion: SchemaVersion}); err != nil {
		t.Fatal(err)
	}
	d, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range d.Results {
		got = append(got, r.SizeBytes)
	}
	if !slices.Equal(got, []int64{32, 16}) {
		t.Errorf("sizes %v, want [32 16]", got)
	}
}

// TestReadRepairsRepeatedCycleRows: a file of --cycles 3 from a version
// that added each row again after every cycle (captured in testdata) reads
// as one row per size holding all three cycles; rows repeated with as many
// cycles stay repeated, for compare to report.
func TestReadRepairsRepeatedCycleRows(t *testing.T) {
	d := readTestdata(t, "cycles-repeated-rows.json", Read)
	var got []string
	for _, r := range d.Results {
		got = append(got, fmt.Sprintf("%d:%d/%d", r.SizeBytes, r.OutOfPlace.Cycles.N, r.InPlace.Cycles.N))
	}
	if want := []string{"8:3/3", "16:3/3"}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	d.Results = append(d.Results, d.Results[0])
	var b bytes.Buffer
	if err := Write(&b, d); err != nil {
		t.Fatal(err)
	}
	again, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Results) != 3 {
		t.Errorf("a true repeat was dropped: %d rows, want 3", len(again.Results))
	}
}

// TestNCCLTextLineWithABadTimeIsNamed: a line of NCCL's benchmark whose
// in-place time is no number keeps its other half, and is named among the
// lines left out, not dropped in silence.
func TestNCCLTextLineWithABadTimeIsNamed(t *testing.T) {
	log := "# Collective test starting: all_reduce_perf\n" +
		"#       size         count    type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n" +
		"        1024           256   float     sum      -1    20.10    0.05    0.04      0    20.10    0.05    0.04      0\n" +
		"        2048           512   float     sum      -1    20.20    0.10    0.08      0      abc    0.10    0.08      0\n"
	d, err := ReadAny(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Results) != 2 || len(d.Unread) != 1 || d.Unread[0] != 4 || !strings.Contains(d.UnreadWords(), "4") {
		t.Fatalf("%d rows, unread lines %v (%q)", len(d.Results), d.Unread, d.UnreadWords())
	}
}
