package tune

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"collbench/internal/golden"
	"collbench/tunefile"

	"collbench/internal/words"
)

func cell(c Choice, ts ...float64) Cell { return Cell{Choice: c, TimesUS: ts} }

var (
	def  = Choice{Default: true}
	ring = Choice{Algorithm: "ring", Protocol: "tcp", Channels: -1}
	rd   = Choice{Algorithm: "recursive_doubling", Protocol: "tcp", Channels: -1}
)

// cpuReport is a search on the cpu backend: recursive doubling well ahead
// at 8 B to 2 KiB (8 B to 512 B share one line), within noise at 8 KiB,
// ahead again at 32 KiB (a line of its own, as 8 KiB is not), the default
// best at 1 MiB.
func cpuReport() *Report {
	r := &Report{Schema: Schema, Backend: "cpu", Ranks: 4, Nodes: 2, Budget: "2m0s", Started: time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC), Complete: true}
	for _, x := range []struct {
		size    int64
		d, f, s []float64
	}{
		{8, []float64{100, 102, 101}, []float64{101, 100, 103}, []float64{40, 41, 40}},
		{512, []float64{110, 111, 112}, []float64{111, 110, 112}, []float64{50, 50, 51}},
		{2048, []float64{130, 131, 129}, []float64{131, 130, 130}, []float64{70, 71, 70}},
		{8192, []float64{200, 230, 170}, []float64{201, 200, 203}, []float64{190, 210, 180}},
		{32768, []float64{400, 401, 402}, []float64{400, 402, 401}, []float64{300, 301, 302}},
		{1 << 20, []float64{5000, 5010, 4990}, []float64{5005, 5000, 5010}, []float64{9000, 9100, 8900}},
	} {
		r.Set("allreduce", NewResult(x.size, []Cell{cell(def, x.d...), cell(ring, x.f...), cell(rd, x.s...)}))
	}
	r.Set("allreduce", Result{Size: 4 << 20}) // not measured: the budget ended first
	return r
}

func TestReportEntriesTableAndFile(t *testing.T) {
	r := cpuReport()
	if r.Complete || len(r.Collectives[0].Results) != 6 {
		t.Fatalf("a size not measured must leave no row and mark the report incomplete: %d rows, complete %v", len(r.Collectives[0].Results), r.Complete)
	}
	es := r.Entries()
	want := [][2]int64{{0, 2048}, {8193, 32768}}
	if len(es) != len(want) {
		t.Fatalf("entries %+v, want ranges %v", es, want)
	}
	for i, e := range es {
		if e.MinBytes != want[i][0] || e.MaxBytes != want[i][1] || e.Algorithm != "recursive_doubling" || e.NRanks != 4 || e.NNodes != 2 {
			t.Errorf("entry %d: %+v, want range %v", i, e, want[i])
		}
	}
	var file bytes.Buffer
	if err := r.WriteTunerFile(&file); err != nil {
		t.Fatal(err)
	}
	back, err := tunefile.ReadFor(strings.NewReader(file.String()), "tuner.csv", tunefile.CPU)
	if err != nil {
		t.Fatalf("the file written does not read back: %v\n%s", err, file.String())
	}
	for i := range back {
		back[i].Line = 0
	}
	if len(back) != len(es) || back[0] != es[0] || back[1] != es[1] {
		t.Errorf("round trip: %+v, want %+v", back, es)
	}
	if _, err := tunefile.Read(strings.NewReader(file.String()), "tuner.csv"); err == nil {
		t.Error("a cpu backend's file read as NCCL's: its algorithm is not NCCL's")
	}
	if e, ok := tunefile.Match(back, "allreduce", 16384, 4, 2); !ok || e.MaxBytes != 32768 {
		t.Errorf("16 KiB matched %+v %v", e, ok)
	}
	if _, ok := tunefile.Match(back, "allreduce", 16384, 8, 2); ok {
		t.Error("a line for 4 ranks matched 8")
	}
	if r.Environment() != "" {
		t.Error("the cpu backend has no environment to set")
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "table.golden", []byte(table.String()+"---\n"+file.String()))
}

// TestReportEntriesOfAJobsSizes: tuned from a job's record (ExactSizes),
// each line covers its size alone, so that the sizes between, which the
// job did not issue, keep the library's own choice (tuned from a PyTorch
// job on 2x H200, a line for the job's 16 MiB covered 5 B to 16 MiB).
func TestReportEntriesOfAJobsSizes(t *testing.T) {
	r := cpuReport()
	r.ExactSizes = true
	es := r.Entries()
	want := [][2]int64{{8, 8}, {512, 512}, {2048, 2048}, {32768, 32768}}
	if len(es) != len(want) {
		t.Fatalf("entries %+v, want ranges %v", es, want)
	}
	for i, e := range es {
		if e.MinBytes != want[i][0] || e.MaxBytes != want[i][1] {
			t.Errorf("entry %d: %+v, want range %v", i, e, want[i])
		}
	}
	if _, ok := tunefile.Match(es, "allreduce", 1024, 4, 2); ok {
		t.Error("1 KiB, which the job did not issue, matched a line")
	}
}

// TestReportEnvironment: one NCCL choice best or within noise at every
// size, and beyond the default somewhere, is the one setting; a size
// where it is beaten beyond noise leaves none.
func TestReportEnvironment(t *testing.T) {
	tree := Choice{Algorithm: "tree", Protocol: "ll", Channels: -1}
	rs := Choice{Algorithm: "ring", Protocol: "simple", Channels: -1}
	r := &Report{Backend: "nccl", Ranks: 8, Nodes: 1}
	r.Set("allreduce", NewResult(8, []Cell{cell(def, 20, 20, 20), cell(tree, 10, 10, 10), cell(rs, 30, 30, 30)}))
	r.Set("allreduce", NewResult(1<<20, []Cell{cell(def, 50, 50, 50), cell(tree, 50.2, 50.1, 50), cell(rs, 60, 60, 60)}))
	if got := r.Environment(); got != "NCCL_ALGO=tree NCCL_PROTO=ll" {
		t.Errorf("environment %q", got)
	}
	r.Set("allreduce", NewResult(1<<30, []Cell{cell(def, 500, 500, 500), cell(tree, 900, 900, 900), cell(rs, 500, 501, 500)}))
	if got := r.Environment(); got != "" {
		t.Errorf("tree is far behind at 1 GiB, yet the environment is %q", got)
	}
}

// TestReportCheck: a file's choice that reproduces its gain, one within
// noise, one slower beyond noise (named by Slower), and a size no line
// covers.
func TestReportCheck(t *testing.T) {
	r := &Report{Backend: "cpu", Ranks: 4, Nodes: 1, Check: "t.csv"}
	r.Set("allreduce", NewResult(8, []Cell{cell(def, 100, 101, 100), cell(rd, 40, 41, 40)}))
	r.Set("allreduce", NewResult(64, []Cell{cell(def, 100, 101, 100), cell(rd, 100, 100, 101)}))
	r.Set("allreduce", NewResult(1<<20, []Cell{cell(def, 100, 101, 100), cell(rd, 300, 301, 300)}))
	r.Set("allreduce", NewResult(4<<20, []Cell{cell(def, 100, 101, 100)}))
	want := []string{"reproduced: +150%", "within noise of the default", "SLOWER than the default by 200%", "no line of the file covers this size"}
	for i, res := range r.Collectives[0].Results {
		if got := r.Verdict(res); got != want[i] {
			t.Errorf("size %d: %q, want %q", res.Size, got, want[i])
		}
	}
	if s := r.Slower(); len(s) != 1 || !strings.Contains(s[0], "1 MiB") {
		t.Errorf("slower %v", s)
	}
}

// ncclReport is a search on NCCL as the lent 2-GPU hosts showed it: NCCL's
// own choice on 1 channel up to 8 KiB, 4 at 32 KiB and 24 above; ring/LL
// ahead at 2 MiB (recorded on 24 channels), tree ahead at 1 GiB; a size
// whose runs the profiler did not record (after its stall).
func ncclReport() *Report {
	r := &Report{Schema: Schema, Backend: "nccl", Ranks: 2, Nodes: 1, Budget: "2m0s", Started: time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC), Complete: true}
	own := func(a, p string, ch int) *Choice { return &Choice{Algorithm: a, Protocol: p, Channels: ch} }
	ll, tree := Choice{Algorithm: "ring", Protocol: "ll", Channels: -1}, Choice{Algorithm: "tree", Protocol: "simple", Channels: -1}
	for _, x := range []struct {
		size   int64
		ran    *Choice
		other  Choice
		d, o   []float64
		ranOth *Choice
	}{
		{8, own("ring", "ll", 1), ll, []float64{10, 10.2, 9.9}, []float64{10.1, 10, 10}, own("ring", "ll", 1)},
		{8192, own("ring", "ll", 1), ll, []float64{10, 10.2, 9.9}, []float64{10.1, 10, 10}, own("ring", "ll", 1)},
		{32768, own("ring", "ll", 4), ll, []float64{10.3, 10.2, 10.4}, []float64{10.3, 10.2, 10.4}, own("ring", "ll", 4)},
		{2 << 20, own("ring", "simple", 24), ll, []float64{28.3, 28.4, 28.2}, []float64{21.9, 22, 21.8}, own("ring", "ll", 24)},
		{32 << 20, own("ring", "simple", 24), tree, []float64{139, 139.5, 139.2}, []float64{139.1, 139.3, 139.4}, own("tree", "simple", 24)},
		{128 << 20, nil, tree, []float64{472, 473, 472.5}, []float64{472, 473, 472.5}, nil},
		{1 << 30, own("ring", "simple", 24), tree, []float64{3284, 3290, 3280}, []float64{3137, 3140, 3135}, own("tree", "simple", 24)},
	} {
		d, o := cell(def, x.d...), cell(x.other, x.o...)
		d.Ran, o.Ran = x.ran, x.ranOth
		res := NewResult(x.size, []Cell{d, o})
		res.Default.Ran = x.ran
		if res.Best.Choice == x.other {
			res.Best.Ran = x.ranOth
		}
		r.Set("allreduce", res)
	}
	return r
}

// TestTunerFileUnderNCCLsExamplePlugin: the file written for NCCL, read as
// NCCL's example plugin reads it, makes NCCL run at every measured size
// either the best choice (where it won) or NCCL's own choice on NCCL's own
// channels; never one channel where NCCL ran more. A size the profiler did
// not record is named in the file's comments instead.
func TestTunerFileUnderNCCLsExamplePlugin(t *testing.T) {
	r := ncclReport()
	var buf bytes.Buffer
	if err := r.WriteTunerFile(&buf); err != nil {
		t.Fatal(err)
	}
	es, err := tunefile.Read(strings.NewReader(buf.String()), "tuner.csv")
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for _, res := range r.Collectives[0].Results {
		got, _ := ExamplePluginChoice(es, "allreduce", res.Size, r.Ranks, r.Nodes)
		var want *Choice
		switch {
		case res.Gain > 0:
			want = res.Best.Ran
		default:
			want = res.Default.Ran
		}
		if want == nil {
			if !strings.Contains(buf.String(), "allreduce "+words.Bytes(res.Size)) {
				t.Errorf("%d B: not recorded, and the file's comments do not name it:\n%s", res.Size, buf.String())
			}
			continue
		}
		if got.Channels != want.Channels || (got.Algorithm != "" && (got.Algorithm != want.Algorithm || got.Protocol != want.Protocol)) {
			t.Errorf("%d B: the example plugin runs %s, want %s\n%s", res.Size, got, want, buf.String())
		}
	}
	// The same report with every line's channels at -1, as a file written
	// without them: the plugin runs NCCL on one channel at 2 MiB and up.
	for i := range es {
		es[i].Channels = -1
	}
	if got, _ := ExamplePluginChoice(es, "allreduce", 1<<30, 2, 1); got.Channels != 1 {
		t.Errorf("a line of -1 channels: the model runs %d channels, the plugin runs 1", got.Channels)
	}
}
