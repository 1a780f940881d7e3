package doctor

import (
	"bytes"
	"strings"
	"testing"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/render"
	"collbench/internal/golden"
)

// sampleReport is a 2-host report with one slow pair and one slow host.
func sampleReport() *record.Report {
	r := &record.Report{Schema: record.Schema, Mode: "full", Backend: "nccl", Ranks: 4, Hosts: []string{"node-a", "node-b"}, Seconds: 41.25,
		GPUs: []record.GPUFigure{{Rank: 0, Host: "node-a", Device: "NVIDIA H200", BusID: "0000:06:00.0", CopyGBps: 2011.5, CopyExpected: 2188.1, FillGelem: 301.2},
			{Rank: 1, Host: "node-a", Device: "NVIDIA H200", BusID: "0000:07:00.0", CopyGBps: 1998.1, CopyExpected: 2188.1, FillGelem: 299.7}},
		Pairs: []record.PairFigure{{A: 0, B: 1, Host: "node-a", Class: "NV18", Expected: 478.1, AB: 41.2, BA: 40.7, Both: 38.9, LatencyUS: 21.4, Transport: "SHM/direct/direct"}},
		Cross: []record.CrossFigure{{HostA: "node-a", HostB: "node-b", A: 0, B: 2, Both: 23.1},
			{HostA: "node-a", HostB: "node-b", A: 0, B: 3, LocalB: 1, Both: 21.7},
			{HostA: "node-a", HostB: "node-b", A: 1, B: 2, LocalA: 1, Both: 22.4},
			{HostA: "node-a", HostB: "node-b", A: 1, B: 3, LocalA: 1, LocalB: 1, Both: 23.0}},
		HostPair: []record.HostPairFigure{{A: "node-a", B: "node-b", BusBW: 21.7}},
		World:    &record.WorldFigure{Ranks: 4, Bytes: 1 << 30, BusBW: 20.5, Expected: 50},
		Plan:     []record.PlanStep{{Stage: "pair", Round: 0, Layout: "[[0,1],[2,3]]", What: "sendrecv both ways"}},
		Stages: []record.StageTime{{Stage: "each GPU alone", Seconds: 3.2}, {Stage: "every GPU pair within a host", Seconds: 12.5},
			{Stage: "across hosts", Seconds: 18.1}, {Stage: "the whole world", Seconds: 4}},
		Findings: []record.Finding{{Severity: "FAIL", Stage: "pair", Kind: "slow-pair", Part: "node-a GPU 0 (0000:06:00.0) ↔ GPU 1 (0000:07:00.0)",
			Ranks: []int{0, 1}, Value: 40.7, Peers: 370, Expected: 478.1, Unit: "GB/s",
			Msg:   "40.7 GB/s one way and 38.9 GB/s both ways, peers 370 GB/s (-89%), expected 478 GB/s over NV18",
			Cause: "NCCL used SHM/direct/direct over this pair although it has NV18 (peer-to-peer disabled or unavailable)"}},
		Counters: []facts.CounterGrowth{
			{Host: "node-a", Stage: "every GPU pair within a host", Part: facts.CounterPart{GPU: 1, BusID: "0000:07:00.0", Link: 3}, Counter: facts.CtrNVLinkCRCData, Before: 554, After: 650, Bytes: 12_400_000_000, Seconds: 12.5},
			{Host: "node-a", Stage: "the whole world", Part: facts.CounterPart{GPU: 1, BusID: "0000:07:00.0", Link: 3}, Counter: facts.CtrNVLinkCRCData, Before: 650, After: 671, Moved: 3_000_000_000, Seconds: 4},
			{Host: "node-b", Stage: "across hosts", Part: facts.CounterPart{GPU: -1, Link: -1, NIC: "mlx5_0 port 1"}, Counter: facts.CtrSymbolError, Before: 0, After: 12, Bytes: 2_000_000_000, Seconds: 18.1},
		},
		History: []record.HistoryChange{
			{Host: "node-a", Part: "GPU 0000:06:00.0", Metric: "copy GB/s", Now: 2011.5, Baseline: 2190, Runs: 5, Since: "2026-11-18T09:00:00Z"},
			{Host: "node-a", Part: "GPU 1 (0000:07:00.0) NVLink 3", Metric: "nvlink_crc_data per GB", Now: 7.6, Baseline: 2.1, Runs: 5, Since: "2026-11-18T09:00:00Z", Flagged: true},
		},
	}
	return r
}

func TestReportFormats(t *testing.T) {
	r := sampleReport()
	var txt, prom, js bytes.Buffer
	if err := render.WriteText(r, &txt); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.txt.golden", txt.Bytes())
	if err := render.WriteProm(r, &prom); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.prom.golden", prom.Bytes())
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.json.golden", js.Bytes())
	if !strings.HasPrefix(txt.String(), "# collbench doctor (full)") || !strings.Contains(strings.Split(txt.String(), "\n")[1], "FAIL node-a GPU 0") {
		t.Error("the verdict must come first")
	}
}

// TestReportHTML checks the page: the verdict and the culprit before any
// map or evidence, the culprit outlined on the map, evidence as tables
// without columns no row fills; the pages are golden.
func TestReportHTML(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *record.Report
	}{
		{"report.html.golden", sampleReport()},
		{"report-64.html.golden", clusterReport(8, 8)},
		{"report-8192.html.golden", clusterReport(1024, 8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := render.WriteHTML(tc.r, &b); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			golden.Check(t, tc.name, b.Bytes())
			v, m := strings.Index(page, `id="verdict"`), strings.Index(page, "<h2")
			if v < 0 || m < 0 || v > m {
				t.Errorf("the verdict must come before the maps and the evidence (verdict at %d, first h2 at %d)", v, m)
			}
			if !tc.r.Healthy && !strings.Contains(page, `class="culprit"`) {
				t.Error("the culprit is not outlined on any map")
			}
			if strings.Contains(page, "<pre>") {
				t.Error("evidence must be tables, not preformatted text")
			}
			if n := strings.Count(page, "<tr"); n > 6000 {
				t.Errorf("the page has %d table rows: it must stay bounded at 1,024 hosts", n)
			}
		})
	}
}
