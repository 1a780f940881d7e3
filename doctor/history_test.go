package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/render"
	"collbench/internal/nvmlmock"
)

func nodeRec(day int, copyGBps float64, crc uint64, gb float64) render.NodeRecord {
	r := render.NodeRecord{Kind: render.HistoryKind, Schema: render.HistorySchema, Host: "node-1", Fingerprint: "f1",
		Time:    time.Date(2026, 11, day, 9, 0, 0, 0, time.UTC),
		Figures: []render.NodeFigure{{Part: "GPU 0000:2a:00.0", Metric: "copy GB/s", Value: copyGBps}, {Part: "GPU 0000:18:00.0", Metric: "copy GB/s", Value: 3500}}}
	if crc > 0 {
		r.Counters = []render.NodeCounter{{Part: "GPU 1 (0000:2a:00.0) NVLink 3", Counter: facts.CtrNVLinkCRCData, Growth: crc, GB: gb}}
	}
	return r
}

// TestCompareNode judges a node's figures against its own past runs: a
// copy 17 % below its median is named, 10 % is not, counters growing 3x
// faster per GB than ever are named, only the last Runs runs count, and a
// first run has nothing to compare with.
func TestCompareNode(t *testing.T) {
	week := []render.NodeRecord{nodeRec(18, 3500, 100, 10), nodeRec(19, 3480, 90, 10), nodeRec(20, 3520, 0, 0)}
	for _, tc := range []struct {
		name  string
		now   render.NodeRecord
		past  []render.NodeRecord
		rules render.HistoryRules
		want  []string // the findings' words, in order
	}{
		{"copy fell 17%", nodeRec(25, 2900, 0, 0), week, render.HistoryRules{}, []string{"copy GB/s 2900.0, 17% below its own median of 3500.0 over its last 3 run(s) since 2026-11-18"}},
		{"copy within 10%", nodeRec(25, 3150, 0, 0), week, render.HistoryRules{}, nil},
		{"a stricter drop", nodeRec(25, 3150, 0, 0), week, render.HistoryRules{Drop: 0.05}, []string{"10% below its own median"}},
		{"counters faster", nodeRec(25, 3500, 300, 10), week, render.HistoryRules{}, []string{"nvlink_crc_data grows at 30 per GB, 3.0x its highest rate in its last 3 run(s) since 2026-11-18 (10 per GB)"}},
		{"counters as before", nodeRec(25, 3500, 150, 10), week, render.HistoryRules{}, nil},
		{"only the last run counts", nodeRec(25, 2900, 0, 0), append(week, nodeRec(24, 2950, 0, 0)), render.HistoryRules{Runs: 1}, nil},
		{"a first run", nodeRec(25, 100, 999, 1), nil, render.HistoryRules{}, nil},
	} {
		changes, fs := render.CompareNode(tc.now, tc.past, tc.rules)
		if len(fs) != len(tc.want) {
			t.Errorf("%s: findings %+v, want %d", tc.name, fs, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(fs[i].Msg, w) || fs[i].Severity != "WARN" || fs[i].Stage != "history" || !strings.HasPrefix(fs[i].Part, "node-1 ") {
				t.Errorf("%s: %+v, want a WARN saying %q", tc.name, fs[i], w)
			}
		}
		flagged := 0
		for _, c := range changes {
			if c.Flagged {
				flagged++
			}
		}
		if flagged != len(tc.want) || (tc.past != nil && len(changes) == 0) {
			t.Errorf("%s: %d of %d comparisons flagged, want %d", tc.name, flagged, len(changes), len(tc.want))
		}
	}
}

// TestHistoryDirBadInput refuses a history that is not writable, or holds a
// record of a newer collbench or of another host, and changes nothing in
// it.
func TestHistoryDirBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := render.CheckHistoryDir(filepath.Join(file, "h"), 0); err == nil || !strings.Contains(err.Error(), "give a directory this user can write") {
		t.Errorf("a path under a file: %v", err)
	}
	write := func(root, rel, body string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // a test fixture
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ body, want string }{
		{`{"kind": "collbench/node-history", "schema": 2, "host": "node-1", "fingerprint": "f1"}`, "of a newer collbench (record version 2"},
		{`{"kind": "collbench/node-history", "schema": 1, "host": "node-7", "fingerprint": "f1"}`, "is from host node-7 but lies under host node-1"},
		{`{"kind": "collbench/node-history", "schema": 1, "host": "node-1", "fingerprint": "f9"}`, "has topology fingerprint f9 but lies under f1"},
		{`{"not": "a record"}`, "is not a collbench node history record"},
	} {
		root := t.TempDir()
		p := write(root, "node-1/f1/20261101T000000Z.json", tc.body)
		err := render.CheckHistoryDir(root, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%s: %v, want one line saying %q", tc.body, err, tc.want)
		}
		if _, err := render.LoadNode(root, "node-1", "f1"); err == nil {
			t.Errorf("%s: loaded", tc.body)
		}
		if b, _ := os.ReadFile(p); string(b) != tc.body {
			t.Errorf("%s: the record changed", tc.body)
		}
	}
}

// TestApplyHistoryKeepsEveryRun runs three reports through one history:
// each is compared with those before it and kept beside them (two in the
// same second included); the third's slow copy is named; a run that
// stopped on a fault is compared but not kept.
func TestApplyHistoryKeepsEveryRun(t *testing.T) {
	dir := t.TempDir()
	m := nvmlmock.HGX("H200")
	gpus, _, _ := facts.ReadGPUHealth(m.NVML())
	rep := func(copyGBps float64) *record.Report {
		return &record.Report{Backend: "nccl", Mode: "full", Healthy: true, Hosts: []string{"node-1"},
			Facts: []facts.HostFacts{{Host: "node-1", GPUs: gpus}},
			GPUs:  []record.GPUFigure{{Rank: 0, Host: "node-1", BusID: "0000:18:00.0", CopyGBps: 3500}, {Rank: 1, Host: "node-1", BusID: "0000:2a:00.0", CopyGBps: copyGBps}},
			Pairs: []record.PairFigure{{A: 0, B: 1, Host: "node-1", AB: 300, BA: 310, Both: 290}}}
	}
	t0 := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for i, c := range []float64{3500, 3490} {
		if _, err := render.ApplyHistory(rep(c), dir, render.HistoryRules{}, t0, "test"); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	r := rep(2800)
	paths, err := render.ApplyHistory(r, dir, render.HistoryRules{}, t0.Add(24*time.Hour), "test")
	if err != nil || len(paths) != 1 {
		t.Fatalf("%v %v", paths, err)
	}
	if len(r.Findings) != 1 || !strings.Contains(r.Findings[0].Part, "GPU 0000:2a:00.0") || !strings.Contains(r.Findings[0].Msg, "20% below its own median") {
		t.Errorf("findings %+v", r.Findings)
	}
	fp := gpus2fp(gpus)
	past, err := render.LoadNode(dir, "node-1", fp)
	if err != nil || len(past) != 3 {
		t.Fatalf("%d records, %v", len(past), err)
	}
	stopped := rep(3500)
	stopped.StoppedIn = "across hosts"
	if paths, err := render.ApplyHistory(stopped, dir, render.HistoryRules{}, t0.Add(48*time.Hour), "test"); err != nil || len(paths) != 0 ||
		!strings.Contains(strings.Join(stopped.Notes, "\n"), "not kept: the run stopped in across hosts") {
		t.Errorf("a stopped run: %v %v %q", paths, err, stopped.Notes)
	}
	if again, _ := render.LoadNode(dir, "node-1", fp); len(again) != 3 {
		t.Errorf("%d records after a stopped run, want 3", len(again))
	}
	// A swapped GPU is a new topology, and a new history.
	swapped := append([]facts.GPUHealth(nil), gpus...)
	swapped[1].BusID = "0000:2b:00.0"
	if gpus2fp(swapped) == fp {
		t.Error("a GPU at another bus id kept the fingerprint")
	}
}

func gpus2fp(g []facts.GPUHealth) string {
	return facts.HostFacts{Host: "node-1", GPUs: g}.Fingerprint()
}

// TestHistoryReadsNewestRuns: doctor reads and checks only each node's
// newest runs, in time order (two runs in one second included), so an old
// record is never parsed; at many hosts the report keeps one note.
func TestHistoryReadsNewestRuns(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "node-1", "f1")
	if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // a test fixture
		t.Fatal(err)
	}
	names := []string{"20261101T000000Z.json", "20261101T000000Z-2.json", "20261101T000000Z-10.json", "20261031T235959Z.json", "20261102T000000Z.json"}
	for _, n := range names {
		body := `{"kind": "collbench/node-history", "schema": 1, "host": "node-1", "fingerprint": "f1"}`
		if n == "20261031T235959Z.json" {
			body = `{"kind": "collbench/node-history", "schema": 9, "host": "node-1", "fingerprint": "f1"}` // old, of a newer collbench
		}
		if err := os.WriteFile(filepath.Join(d, n), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, f := range render.NewestFiles(d, 0) {
		got = append(got, filepath.Base(f))
	}
	want := []string{"20261031T235959Z.json", "20261101T000000Z.json", "20261101T000000Z-2.json", "20261101T000000Z-10.json", "20261102T000000Z.json"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("order %v, want %v", got, want)
	}
	if n := len(render.NewestFiles(d, 3)); n != 3 {
		t.Errorf("newest 3: %d files", n)
	}
	if err := render.CheckHistoryDir(dir, 4); err != nil {
		t.Errorf("the newest 4 runs are good, yet: %v", err)
	}
	if err := render.CheckHistoryDir(dir, 5); err == nil || !strings.Contains(err.Error(), "of a newer collbench") {
		t.Errorf("the newest 5 runs hold a record of a newer collbench: %v", err)
	}

	// 64 hosts, half with a past: one note, naming a few new hosts.
	hist := t.TempDir()
	r := scaleReport(64, 2)
	r.Hosts = r.Hosts[:32]
	if _, err := render.ApplyHistory(r, hist, render.HistoryRules{}, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), "test"); err != nil {
		t.Fatal(err)
	}
	r = scaleReport(64, 2)
	paths, err := render.ApplyHistory(r, hist, render.HistoryRules{}, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), "test")
	if err != nil || len(paths) != 64 {
		t.Fatalf("%d records kept, %v", len(paths), err)
	}
	if len(r.Notes) != 1 {
		t.Fatalf("%d notes, want one for every host: %q", len(r.Notes), r.Notes)
	}
	for _, w := range []string{"32 hosts compared with their own past (1 run each)", "32 hosts with no past runs yet (node-0032, node-0033, node-0034 and 29 more)", "this run kept for each (64)"} {
		if !strings.Contains(r.Notes[0], w) {
			t.Errorf("note %q lacks %q", r.Notes[0], w)
		}
	}
}
