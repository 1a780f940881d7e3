package doctor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"collbench/doctor/internal/record"
	"collbench/doctor/internal/render"
)

// The cost of a node history at cluster scale: 1,024 hosts of 8 GPUs,
// each host with 30 past runs (a month of daily runs) already kept. Run:
// go test ./doctor -run '^$' -bench History -benchtime 3x
//
// CheckHistoryDir runs before every doctor run with --history, and
// ApplyHistory on rank 0 after it; both read the directory.

const benchHosts, benchGPUs, benchPast = 1024, 8, 30

// scaleReport is a healthy report of hosts × gpus ranks on a host-memory
// backend (no NVML facts: the fingerprint is the devices').
func scaleReport(hosts, gpus int) *record.Report {
	r := &record.Report{Backend: "cpu", Mode: "full", Healthy: true}
	for h := 0; h < hosts; h++ {
		name := fmt.Sprintf("node-%04d", h)
		r.Hosts = append(r.Hosts, name)
		for g := 0; g < gpus; g++ {
			rank := h*gpus + g
			r.GPUs = append(r.GPUs, record.GPUFigure{Rank: rank, Host: name, Device: fmt.Sprintf("dev%d", g), CopyGBps: 3000 + float64(g), FillGelem: 100})
		}
		for g := 0; g+1 < gpus; g += 2 {
			r.Pairs = append(r.Pairs, record.PairFigure{A: h*gpus + g, B: h*gpus + g + 1, Host: name, AB: 300, BA: 300, Both: 590})
		}
	}
	return r
}

// seedHistory writes past runs of every host of r straight to dir (no
// fsync: this is the setup, not the cost measured).
func seedHistory(tb testing.TB, dir string, r *record.Report, past int) {
	t0 := time.Date(2026, 10, 1, 3, 0, 0, 0, time.UTC)
	for d := 0; d < past; d++ {
		for _, rec := range render.NodeRecords(r, t0.Add(time.Duration(d)*24*time.Hour), "bench") {
			nd := render.NodeDir(dir, rec.Host, rec.Fingerprint)
			if err := os.MkdirAll(nd, 0o750); err != nil {
				tb.Fatal(err)
			}
			b, _ := json.Marshal(rec)
			if err := os.WriteFile(filepath.Join(nd, rec.Time.Format("20060102T150405Z")+".json"), b, 0o600); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

func BenchmarkHistoryAtScale(b *testing.B) {
	dir := b.TempDir()
	r := scaleReport(benchHosts, benchGPUs)
	seedHistory(b, dir, r, benchPast)
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if err := render.CheckHistoryDir(dir, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		t := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
		for b.Loop() {
			rep := scaleReport(benchHosts, benchGPUs)
			if _, err := render.ApplyHistory(rep, dir, render.HistoryRules{}, t, "bench"); err != nil {
				b.Fatal(err)
			}
			t = t.Add(time.Hour)
		}
	})
}
