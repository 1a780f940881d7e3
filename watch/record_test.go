package watch

import (
	"bytes"
	"testing"
	"time"

	"collbench/internal/golden"
)

// TestRecordKeepsEveryFindingAndWhatStands: a rank named on its GPU, a
// rank named on its host, the first cleared, a slow link named, a rank
// whose links are all slow: the document lists all five in order, the
// second, the link and the last stand, and each named one says the doctor
// command that would confirm it; then a GPU whose NVLinks carry another
// program's copies, named on the same rank as the first: it stands beside
// the rank's own finding. The Prometheus text gives what stands; both say
// what the collector took in.
func TestRecordKeepsEveryFindingAndWhatStands(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	r := NewRecord(t0)
	gpu := Finding{Comm: 0xabc, Rank: 3, Host: "node07", GPU: "0000:5d:00.0", Cause: CauseGPU, By: 1200 * time.Microsecond, Late: 28, Of: 32, SinceSeq: 40}
	host := Finding{Comm: 0xabc, Rank: 1, Host: "node02", Cause: CauseIssue, By: 350 * time.Microsecond, Late: 25, Of: 32, SinceSeq: 90}
	r.Add(gpu, t0.Add(10*time.Second))
	r.Add(host, t0.Add(20*time.Second))
	cleared := gpu
	cleared.Cleared, cleared.ClearedSeq = true, 130
	r.Add(cleared, t0.Add(30*time.Second))
	link := Finding{Comm: 0xabc, Rank: 5, Host: "node03", GPU: "0000:18:00.0", Cause: CauseLink, Late: 27, Of: 32, SinceSeq: 140,
		Link: &LinkFinding{Peer: 6, PeerHost: "node04", PeerGPU: "0000:18:00.0", Rate: 2.1e9, Median: 21.5e9}}
	r.Add(link, t0.Add(35*time.Second))
	end := Finding{Comm: 0xabc, Rank: 9, Host: "node05", GPU: "0000:2a:00.0", Cause: CauseEnd, Late: 32, Of: 32, SinceSeq: 150,
		Link: &LinkFinding{Peer: -1, Rate: 3.2e9, Median: 21.5e9}}
	r.Add(end, t0.Add(36*time.Second))
	r.Add(host, t0.Add(37*time.Second))
	nv := Finding{Comm: 0xabc, Rank: 1, Host: "node02", GPU: "0000:3b:00.0", Cause: CauseNVLink, Late: 8, Of: 8,
		NVLink: &NVLinkFinding{OutBps: 182e9, CountedBps: 228e9, JobBps: 46e9, Peers: []string{"0000:5d:00.0"}}}
	r.Add(nv, t0.Add(38*time.Second))
	r.SetCounts(Counts{Processes: 16, Summaries: 51200, Dropped: 8, Operations: 3199, Links: 1600, LinksIn: 1712, Communicators: 2,
		NVLink: &NVLinkCounts{GPUs: 8, Readings: 1000}}, t0.Add(40*time.Second))
	if len(r.Findings) != 7 || r.Total != 7 || len(r.Standing) != 4 || r.Standing[0].Link == nil || r.Standing[1].Link.Peer != -1 ||
		r.Standing[2].Rank != 1 || r.Standing[2].NVLink != nil || r.Standing[3].NVLink == nil {
		t.Fatalf("findings %d (total %d), standing %+v", len(r.Findings), r.Total, r.Standing)
	}
	if r.Findings[0].Confirm == "" || r.Findings[2].Confirm != "" {
		t.Errorf("confirm commands: %q, %q", r.Findings[0].Confirm, r.Findings[2].Confirm)
	}
	var js, prom bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteProm(&prom); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "record.golden.json", js.Bytes())
	golden.Check(t, "record.golden.prom", prom.Bytes())
}

// TestRecordIsBounded: a rank that flaps for weeks cannot grow the
// document without bound: the newest MaxRecorded findings stay, the rest
// are counted.
func TestRecordIsBounded(t *testing.T) {
	r := NewRecord(time.Unix(0, 0))
	f := Finding{Comm: 1, Rank: 2, Host: "h", Cause: CauseIssue}
	for i := range MaxRecorded + 250 {
		f.Cleared = i%2 == 1
		f.SinceSeq = uint64(i) //nolint:gosec // G115: a loop index, not negative
		r.Add(f, time.Unix(int64(i), 0))
	}
	if len(r.Findings) != MaxRecorded || r.LeftOut != 250 || r.Total != MaxRecorded+250 {
		t.Fatalf("kept %d, left out %d, total %d", len(r.Findings), r.LeftOut, r.Total)
	}
	if r.Findings[0].SinceSeq != 250 || len(r.Standing) != 0 {
		t.Errorf("the oldest kept is operation %d, standing %d", r.Findings[0].SinceSeq, len(r.Standing))
	}
}
