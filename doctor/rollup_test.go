package doctor

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"collbench/doctor/internal/record"
	"collbench/doctor/internal/render"
	"collbench/doctor/internal/rules"
	"collbench/internal/golden"
	"collbench/internal/racebuild"
	"collbench/internal/words"
)

// clusterReport is a full doctor report of hosts × gpus ranks, its figures
// spread deterministically around H200 rates, with planted slow parts
// when the world has more than one host: a GPU slow to copy (rank 173),
// a slow NVLink pair on the host of rank 4000, a host slow alike, and a
// slow link between two hosts; and warnings on many hosts.
func clusterReport(hosts, gpus int) *record.Report {
	n := hosts * gpus
	host := func(h int) string { return fmt.Sprintf("node-%04d", h) }
	bus := func(l int) string { return fmt.Sprintf("0000:%02x:00.0", 0x18+l*0x10) }
	jitter := func(i, k int) float64 { return 1 + float64((i*7919+k*104729)%201-100)/10000 } // ±1%
	r := &record.Report{Schema: record.Schema, Mode: "full", Backend: "nccl", Ranks: n, Seconds: 96.4, Healthy: true}
	for h := 0; h < hosts; h++ {
		r.Hosts = append(r.Hosts, host(h))
	}
	slowHost := -1
	if hosts > 1 {
		slowHost = hosts * 3 / 4
	}
	for rank := 0; rank < n; rank++ {
		h, l := rank/gpus, rank%gpus
		g := record.GPUFigure{Rank: rank, Host: host(h), Device: "NVIDIA H200", BusID: bus(l),
			CopyGBps: 2011.5 * jitter(rank, 1), CopyExpected: 2188.1, FillGelem: 174.1 * jitter(rank, 2), FillExpected: 174.5}
		if rank == 173 && n > 173 {
			g.CopyGBps *= 0.6
		}
		if h == slowHost {
			g.FillGelem *= 0.55
		}
		r.GPUs = append(r.GPUs, g)
	}
	for round, pairs := range rules.PairRounds(gpus) {
		var layout [][]int
		for h := 0; h < hosts; h++ {
			for _, p := range pairs {
				a, b := h*gpus+p[0], h*gpus+p[1]
				layout = append(layout, []int{a, b})
				f := record.PairFigure{A: a, B: b, Host: host(h), Class: "NV18", Expected: 478.1, AB: 368.2 * jitter(a, b), BA: 367.9 * jitter(b, a),
					Both: 361.0 * jitter(a+b, 3), LatencyUS: 19.8 * jitter(a, 4), Transport: "P2P/CUMEM"}
				if n > 4000 && a/gpus == 4000/gpus && p == [2]int{0, 5} {
					f.AB, f.BA, f.Both = 121.4, 120.9, 101.2
				}
				r.Pairs = append(r.Pairs, f)
			}
		}
		r.Plan = append(r.Plan, record.PlanStep{Stage: "pair", Round: round, Layout: words.GroupsFull(layout), What: "sendrecv both ways at 256 MiB and 4 KiB; broadcast each way at 256 MiB"})
	}
	r.Plan = append([]record.PlanStep{{Stage: "health", What: fmt.Sprintf("NVML and sysfs facts of %d host(s), no traffic", hosts), Layout: "-"},
		{Stage: "gpu", Layout: "singletons", What: "copy 256 MiB on every GPU at once, and the fill kernel"}}, r.Plan...)
	step := 0
	for _, hp := range rules.HostRounds(hosts) {
		for s, cross := range CrossRounds(gpus, gpus) {
			var layout [][]int
			for _, p := range hp {
				for _, c := range cross {
					a, b := p[0]*gpus+c[0], p[1]*gpus+c[1]
					layout = append(layout, []int{a, b})
					f := record.CrossFigure{HostA: host(p[0]), HostB: host(p[1]), A: a, B: b, LocalA: c[0], LocalB: c[1], Both: 44.1 * jitter(a, b)}
					if p[0] == 2 && p[1] == 3 {
						f.Both *= 0.4
					}
					r.Cross = append(r.Cross, f)
				}
			}
			what := "rails: sendrecv both ways at 256 MiB"
			if s > 0 {
				what = fmt.Sprintf("local rank l with l+%d on the other host: sendrecv both ways at 256 MiB", s)
			}
			r.Plan = append(r.Plan, record.PlanStep{Stage: "host", Round: step, Layout: words.GroupsFull(layout), What: what})
			step++
		}
		var layout [][]int
		for _, p := range hp {
			var g []int
			for k := 0; k < 2*gpus; k++ {
				g = append(g, p[k/gpus]*gpus+k%gpus)
			}
			layout = append(layout, g)
			bw := 41.3 * jitter(p[0], p[1])
			if p[0] == 2 {
				bw *= 0.45
			}
			r.HostPair = append(r.HostPair, record.HostPairFigure{A: host(p[0]), B: host(p[1]), Round: step, BusBW: bw})
		}
		r.Plan = append(r.Plan, record.PlanStep{Stage: "host", Round: step, Layout: words.GroupsFull(layout), What: "host pairs: allreduce at 256 MiB"})
		step++
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	r.Plan = append(r.Plan, record.PlanStep{Stage: "world", Layout: words.GroupsFull([][]int{all}), What: "allreduce at 1 GiB"})
	r.World = &record.WorldFigure{Ranks: n, Bytes: 1 << 30, BusBW: 351.2, Expected: 360}
	if hosts > 1 {
		// The world's allreduce on rails: every GPU sends to its rail on
		// the next host; host 2's GPU 3 has a slow NIC, both ways.
		r.PathsSeen = []record.PathsSeen{{Stage: "host", Paths: 2 * hosts * gpus, Median: 46.2, Slow: 2}, {Stage: "world", Paths: n, Median: 45.8, Slow: 2}}
		for _, p := range [][2]int{{gpus + 3, 2*gpus + 3}, {2*gpus + 3, 3*gpus + 3}} {
			if p[1] < n {
				r.SlowPaths = append(r.SlowPaths, record.PathFigure{Stage: "world", From: p[0], To: p[1], FromHost: host(p[0] / gpus), ToHost: host(p[1] / gpus),
					Bytes: 1 << 28, WireUS: 11460, GBps: 23.4, Peers: 45.8, Expected: 50, Why: "49% below its peers' median"})
			}
		}
	}
	if hosts > 1 {
		r.World.BusBW, r.World.Expected = 39.8, 45
	}
	r.Stages = []record.StageTime{{Stage: "health facts", Seconds: 1.2}, {Stage: "each GPU alone", Seconds: 3.1}, {Stage: "every GPU pair within a host", Seconds: 14.2},
		{Stage: "across hosts", Seconds: 61.3}, {Stage: "the whole world", Seconds: 16.6}}
	if n > 173 {
		r.Healthy = false
		r.Findings = append(r.Findings,
			record.Finding{Severity: "FAIL", Stage: "gpu", Kind: "slow-gpu", Part: host(173/gpus) + " GPU 5 (" + bus(5) + ")", Host: host(173 / gpus), Ranks: []int{173},
				Msg: "copy 1206.9 GB/s, peers 2011.5 GB/s (-40%), expected 2188.1 GB/s"},
			record.Finding{Severity: "FAIL", Stage: "gpu", Kind: "slow-host", Part: host(slowHost), Host: host(slowHost),
				Msg: "fill 95.8 Gelem/s on all 8 GPUs, peers 174.1 (-45%), expected 174.5: the whole host is slow alike"},
			record.Finding{Severity: "FAIL", Stage: "pair", Kind: "slow-pair", Part: host(500) + " GPU 0 (" + bus(0) + ") ↔ GPU 5 (" + bus(5) + ")", Host: host(500), Ranks: []int{4000, 4005},
				Msg: "120.9 GB/s one way, peers 368 GB/s (-67%), expected 478 GB/s over NV18"},
			record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-link", Part: "the link between " + host(2) + " and " + host(3), Host: host(2),
				Msg: "every GPU pair of the two hosts 17.6 GB/s, peers 44.1 GB/s (-60%); each host is healthy with another partner"})
		for h := 0; h < 24; h++ {
			r.Findings = append(r.Findings, record.Finding{Severity: "WARN", Stage: "health", Kind: "nvlink-errors", Part: host(40*h+7) + " GPU 1 (" + bus(1) + ")", Host: host(40*h + 7),
				Msg: "NVLink errors since boot: crc_data 554; a marginal NVLink: watch whether the counts grow"})
		}
		record.SortFindings(r.Findings)
	}
	return r
}

// TestReportAtScale renders the report of 8 ranks on one host (every
// figure) and of 8,192 ranks on 1,024 hosts (rolled up, under 80 lines,
// the planted parts among the outliers), and the large one in full on
// request.
func TestReportAtScale(t *testing.T) {
	racebuild.SkipLongModelRun(t) // 13 s under -race, 1.6 s without: the report renders alone
	small := clusterReport(1, 8)
	var txt bytes.Buffer
	if err := render.WriteText(small, &txt); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report-8.txt.golden", txt.Bytes())

	big := clusterReport(1024, 8)
	txt.Reset()
	if err := render.WriteText(big, &txt); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report-8192.txt.golden", txt.Bytes())
	out := txt.String()
	if lines := strings.Count(out, "\n"); lines >= 80 {
		t.Errorf("the report of 8,192 ranks has %d lines (want under 80)", lines)
	}
	for _, want := range []string{
		" 173 | node-0021 | 0000:68:00.0 |", // the GPU slow to copy, first among those that stand out
		" node-0768 |    8 |",               // the host slow alike, first among the slowest hosts
		" node-0500 | 4000-4005 |",          // the slow pair
		" node-0002 - node-0003 |",          // the slow host pair
		"... and 18 more finding(s), 0 of them FAIL",
		"4,096 groups of 2: [[0,7],[1,6],",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report of 8,192 ranks lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 240 {
			t.Errorf("a line of %d characters: %.100s…", len(line), line)
		}
	}
	txt.Reset()
	if err := render.WriteTextWith(big, &txt, render.EvidenceAll); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(txt.String(), "\n"); lines < len(big.GPUs)+len(big.Pairs) {
		t.Errorf("--evidence all wrote %d lines for %d GPUs and %d pairs", lines, len(big.GPUs), len(big.Pairs))
	}
}

func TestParseEvidence(t *testing.T) {
	for in, want := range map[string]render.Evidence{"": render.EvidenceAuto, "auto": render.EvidenceAuto, "Summary": render.EvidenceSummary, "all": render.EvidenceAll} {
		if got, err := render.ParseEvidence(in); err != nil || got != want {
			t.Errorf("ParseEvidence(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := render.ParseEvidence("everything"); err == nil || !strings.Contains(err.Error(), "valid: auto, summary, all") {
		t.Errorf("an unknown amount: %v", err)
	}
}
