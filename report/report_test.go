package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"collbench/internal/golden"

	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
)

func wrong(n int64) *int64 { return &n }

// sampleDocument is a fixed two-collective run.
func sampleDocument() *results.Document {
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	d := &results.Document{
		Schema: results.Schema, SchemaVersion: results.SchemaVersion,
		Tool:    results.Tool{Name: "collbench", Version: "1.2.3"},
		Command: []string{"collbench", "sweep", "--collectives", "allreduce,broadcast", "--sizes", "8,1M,64M"},
		Started: start, Finished: start.Add(3 * time.Second),
		Config: results.Config{Collectives: []string{"allreduce", "broadcast"}, Sizes: []int64{8, 1 << 20, 64 << 20},
			DTypes: []string{"float"}, Ops: []string{"sum"}, Root: "0", Ranks: 4, Iters: 20, Warmup: 5,
			Check: 1, Mode: "both", Average: "mean", Seed: 1, Backend: "auto"},
		Environment: results.Environment{Host: "node-a", OS: "linux", Arch: "amd64", GoVersion: "go1.26.8",
			Backend: results.Backend{Name: "nccl", Version: "2.28.3", VersionCode: 22803, Library: "/usr/lib/libnccl.so.2",
				Driver: "CUDA driver 13.0", Devices: []results.Device{
					{Rank: 0, Name: "NVIDIA H200", BusID: "0000:00:06.0"}, {Rank: 1, Name: "NVIDIA H200", BusID: "0000:00:07.0"},
					{Rank: 2, Name: "NVIDIA H200", BusID: "0000:00:08.0"}, {Rank: 3, Name: "NVIDIA H200", BusID: "0000:00:09.0"}}},
			Env: map[string]string{"NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}},
	}
	d.Results = []results.Row{
		{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 8, Count: 2, Ranks: 4,
			OutOfPlace: &results.Half{TimeUS: 8.51, AlgBW: 0.00094, BusBW: 0.00141, Wrong: wrong(0), RankTimeUS: []float64{8.4, 8.5, 8.6, 8.55}},
			InPlace:    &results.Half{TimeUS: 8.42, AlgBW: 0.00095, BusBW: 0.00143, Wrong: wrong(0)}},
		{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 1 << 20, Count: 262144, Ranks: 4,
			OutOfPlace: &results.Half{TimeUS: 24.19, AlgBW: 43.35, BusBW: 65.02, Wrong: wrong(0)},
			InPlace:    &results.Half{TimeUS: 23.8, AlgBW: 44.06, BusBW: 66.09, Wrong: wrong(0)}},
		{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 64 << 20, Count: 16777216, Ranks: 4,
			OutOfPlace: &results.Half{TimeUS: 320.5, AlgBW: 209.4, BusBW: 314.1, Wrong: wrong(0)},
			InPlace: &results.Half{TimeUS: 12345.6, AlgBW: 5.43, BusBW: 8.15, Wrong: wrong(3),
				Mismatches: []results.Mismatch{{Rank: 1, Index: 4096, Want: "12", Got: "NaN"}, {Rank: 3, Index: 7, Want: "-4", Got: "-3"}}}},
		{Collective: "broadcast", DType: "float", Op: "none", Root: 0, SizeBytes: 8, Count: 2, Ranks: 4,
			OutOfPlace: &results.Half{TimeUS: 9.1, AlgBW: 0.00088, BusBW: 0.00088},
			InPlace:    &results.Half{TimeUS: 9.0, AlgBW: 0.00089, BusBW: 0.00089}},
	}
	d.Summary = results.Summarize(d.Results, false)
	return d
}

func TestTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, sampleDocument()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "sweep.table.golden", b.Bytes())
}

func TestTableOneModeAndError(t *testing.T) {
	d := sampleDocument()
	d.Config.Collectives = []string{"allreduce"}
	d.Results = d.Results[:2]
	for i := range d.Results {
		d.Results[i].InPlace = nil
	}
	d.Error = "allreduce float sum size 128M: out of memory on rank 2: asked for 128.0 MiB, 12.0 MiB free"
	d.Environment.Env = nil
	var b bytes.Buffer
	if err := WriteTable(&b, d); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "oop-error.table.golden", b.Bytes())
}

func TestJSONGoldenAndRoundTrip(t *testing.T) {
	var b bytes.Buffer
	d := sampleDocument()
	if err := results.Write(&b, d); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "sweep.json.golden", b.Bytes())
	back, err := results.Read(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 4 || *back.Results[2].InPlace.Wrong != 3 || back.Results[3].OutOfPlace.Wrong != nil {
		t.Fatalf("round trip lost data: %+v", back.Results)
	}
}

func TestCSVGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, sampleDocument()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "sweep.csv.golden", b.Bytes())
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 1+8 {
		t.Fatalf("want a header and 8 lines (4 rows x 2 modes), got %d", len(lines))
	}
}

func TestReadRejectsForeignAndFutureDocuments(t *testing.T) {
	for _, in := range []string{`{"schema":"other"}`, `{"schema":"collbench/result","schema_version":99}`, `[1,2]`, `nope`} {
		if _, err := results.Read(strings.NewReader(in)); err == nil {
			t.Errorf("Read(%s) succeeded", in)
		}
	}
}

func TestFormatHelpers(t *testing.T) {
	for in, want := range map[float64]string{8.514: "8.51", 123.45: "123.5", 12345.6: "12346"} {
		if got := FormatTime(in); got != want {
			t.Errorf("FormatTime(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{8: "8 B", 1000: "1000 B", 1024: "1 KiB", 64 << 20: "64 MiB", 4 << 30: "4 GiB"} {
		if got := words.Bytes(in); got != want {
			t.Errorf("words.Bytes(%d) = %q, want %q", in, got, want)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("xml accepted")
	}
}

func TestGroupedTableGolden(t *testing.T) {
	d := sampleDocument()
	d.Config.Collectives = []string{"allreduce"}
	d.Config.RankList = "[[1,2,3],[0]]"
	d.Config.Groups = [][]int{{1, 2, 3}, {0}}
	g0 := &results.Half{TimeUS: 30.5, AlgBW: 34.38, BusBW: 45.84, Wrong: wrong(0)}
	g1 := &results.Half{TimeUS: 4.1, Wrong: wrong(0)}
	d.Results = []results.Row{{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 1 << 20, Count: 262144, Ranks: 4,
		OutOfPlace: &results.Half{TimeUS: 30.5, AlgBW: 34.38, BusBW: 45.84, Wrong: wrong(0)},
		Groups: []results.GroupResult{
			{ID: 0, Ranks: []int{1, 2, 3}, SizeBytes: 1 << 20, Count: 262144, OutOfPlace: g0},
			{ID: 1, Ranks: []int{0}, SizeBytes: 1 << 20, Count: 262144, NoBandwidth: true, OutOfPlace: g1},
		}}}
	d.Environment.Env = nil
	var b bytes.Buffer
	if err := WriteTable(&b, d); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "groups.table.golden", b.Bytes())
}

func TestGroupVerificationGolden(t *testing.T) {
	v := &results.GroupVerification{Tool: results.Tool{Name: "collbench", Version: "1.2.3"},
		Backend: results.Backend{Name: "cpu", Version: "go1.26.8"}, Ranks: 4,
		Layouts: []results.LayoutVerify{{
			Name: "reversed", Groups: [][]int{{1, 2, 3}, {0}},
			Communicators: []results.CommInfo{
				{WorldRank: 0, WorldSize: 4, Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, GroupID: 1, GroupSize: 2, Host: "h0"},
				{WorldRank: 1, WorldSize: 4, Rank: 0, Size: 3, LocalRank: 0, LocalSize: 1, GroupID: 0, GroupSize: 2, Host: "h0"},
				{WorldRank: 2, WorldSize: 4, Rank: 1, Size: 3, LocalRank: 0, LocalSize: 2, GroupID: 0, GroupSize: 2, Host: "h1"},
				{WorldRank: 3, WorldSize: 4, Rank: 2, Size: 3, LocalRank: 1, LocalSize: 2, GroupID: 0, GroupSize: 2, Host: "h1"}},
			AllReduce: []results.BeforeAfter{{WorldRank: 0, Before: 1, After: 1, Want: 1}, {WorldRank: 1, Before: 2, After: 9, Want: 9},
				{WorldRank: 2, Before: 3, After: 9, Want: 9}, {WorldRank: 3, Before: 4, After: 8, Want: 9}},
			Collectives: []results.CollectiveVerify{
				{Collective: "allreduce", SimpleWrong: 64, Mismatches: []results.Mismatch{{Rank: 3, Index: 0, Want: "9", Got: "8"}}},
				{Collective: "allgather", Pass: true}},
		}}}
	var b bytes.Buffer
	if err := WriteGroupVerification(&b, v); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "verify-groups.golden", b.Bytes())
}

// TestGroupVerificationStoppedGolden: a run stopped by the watchdog in
// its second layout's last collective says where it stopped and which
// layouts it never reached; the matrix keeps every column of the first
// layout, and the layouts not reached get no rank table.
func TestGroupVerificationStoppedGolden(t *testing.T) {
	comms := func(groups [][]int) []results.CommInfo {
		l := measure.Layout{Groups: groups}
		var out []results.CommInfo
		for r := range 4 {
			out = append(out, l.Info(r, []string{"h0", "h0", "h0", "h0"}))
		}
		return out
	}
	passed := []results.CollectiveVerify{{Collective: "allreduce", Pass: true}, {Collective: "allgather", Pass: true}, {Collective: "hypercube", Pass: true}}
	v := &results.GroupVerification{Tool: results.Tool{Name: "collbench", Version: "1.2.3"},
		Backend: results.Backend{Name: "nccl", Version: "2.28.3"}, Ranks: 4,
		Error: "watchdog: rank 3 (h0, GPU 0000:5d:00.0) has not finished the check of hypercube, rank r contributes r+1 in layout pairs after 5m0s; ranks 0-2 are waiting for it",
		Layouts: []results.LayoutVerify{
			{Name: "all", Groups: [][]int{{0, 1, 2, 3}}, Communicators: comms([][]int{{0, 1, 2, 3}}), Collectives: passed},
			{Name: "pairs", Groups: [][]int{{0, 1}, {2, 3}}, Communicators: comms([][]int{{0, 1}, {2, 3}}), Collectives: passed[:2],
				Stopped: "hypercube, rank r contributes r+1"},
			{Name: "uneven", Groups: [][]int{{0, 1, 2}, {3}}, Stopped: results.NotStarted},
			{Name: "singletons", Groups: [][]int{{0}, {1}, {2}, {3}}, Stopped: results.NotStarted}}}
	var b bytes.Buffer
	if err := WriteGroupVerification(&b, v); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "verify-groups-stopped.golden", b.Bytes())
}

// TestTopologyAndPeakGolden renders a table with a topology summary and the
// %peak column, grouped and not.
func TestTopologyAndPeakGolden(t *testing.T) {
	d := sampleDocument()
	d.Topology = &results.TopologySummary{Summary: "4x NVIDIA H200; NV18 between all pairs; NVLink 18 x 26.56 = 478.1 GB/s per GPU",
		Fingerprint: "0123456789ab", GPUs: 4, Nodes: 1, PeakGBps: 478.125, PeakLabel: "NVLink, 18 x 26.56 GB/s per GPU per direction"}
	d.Environment.Env = nil
	var b bytes.Buffer
	if err := WriteTable(&b, d); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "peak.table.golden", b.Bytes())
	if !strings.Contains(b.String(), "65.7") { // 314.10 / 478.125
		t.Errorf("%%peak of the 64 MiB row missing:\n%s", b.String())
	}
}

// TestOneRankHasNoPeakShare: a one-rank row reports algbw as the reference
// benchmark does, but nothing crossed a link, so %peak is a dash.
func TestOneRankHasNoPeakShare(t *testing.T) {
	d := sampleDocument()
	d.Topology = &results.TopologySummary{Summary: "1x NVIDIA H200", GPUs: 1, Nodes: 1, PeakGBps: 478.125, PeakLabel: "NVLink"}
	d.Results = []results.Row{{Collective: "broadcast", DType: "float", Op: "none", Root: 0, SizeBytes: 1 << 30, Count: 268435456, Ranks: 1,
		OutOfPlace: &results.Half{TimeUS: 505.9, AlgBW: 2122.25, BusBW: 2122.25, Wrong: wrong(0)}}}
	var b bytes.Buffer
	if err := WriteTable(&b, d); err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, "1 GiB") {
			row = l
		}
	}
	f := strings.Fields(strings.ReplaceAll(row, "|", " "))
	// size(2) count type redop root time algbw busbw %peak #wrong
	if len(f) < 11 || f[7] != "2122.25" || f[9] != "-" {
		t.Fatalf("one-rank row %q: want busbw 2122.25 and %%peak -", row)
	}
}

// TestSlowestRankLine: a rank that is slowest in most measurements is
// named with its excess; ranks within 1% of their mean name nobody (one
// process whose ranks share a clock used to print "by 0.0%").
func TestSlowestRankLine(t *testing.T) {
	row := func(times ...float64) results.Row {
		return results.Row{Collective: "allreduce", SizeBytes: 1 << 20, Ranks: len(times),
			OutOfPlace: &results.Half{TimeUS: times[0], RankTimeUS: times}}
	}
	comms := []results.CommInfo{{Host: "a"}, {Host: "a"}, {Host: "b"}}
	for _, tc := range []struct {
		name string
		rows []results.Row
		want string
	}{
		{"one slow rank", []results.Row{row(10, 10, 13), row(10, 10.2, 13)}, "# slowest rank:      2 on b, slowest in 2 of 2 measurements"},
		{"even ranks", []results.Row{row(10, 10.01, 10), row(10.02, 10, 10)}, "none stands out: every rank within 1% of the ranks' mean in 2 measurements"},
	} {
		if got := stragglerLine(tc.rows, comms); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTableOfRealRecords renders a run recorded by collbench's profiler
// plugin inside NCCL 2.28.3 (two processes as two hosts on one H200). The
// file predates the alignment of GPU timers to the host clock: its starts
// are on GPU timers that cannot be compared, so there is no late-kernel
// column or line.
func TestTableOfRealRecords(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "doctor", "testdata", "nccl-2.28.3-two-processes.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := results.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, d); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "recorded.table.golden", b.Bytes())
}
