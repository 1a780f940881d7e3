package doctor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"collbench/doctor/internal/render"
	"collbench/internal/golden"
)

// TestNodeHistoryPage writes a node's history of four runs, the newest
// with a GPU copying 20 % below its past and a link's errors growing
// faster, beside a record under an earlier fingerprint: the page says what
// got worse first, draws a plot per metric with its legend outside the
// data, and lists the runs newest first (golden).
func TestNodeHistoryPage(t *testing.T) {
	dir := t.TempDir()
	day := func(d int) time.Time { return time.Date(2026, 11, d, 9, 30, 0, 0, time.UTC) }
	old := nodeRec(10, 3500, 0, 0)
	old.Fingerprint = "f0"
	for _, r := range []render.NodeRecord{old, nodeRec(18, 3500, 20, 10), nodeRec(19, 3480, 10, 10), nodeRec(20, 3520, 15, 10), nodeRec(25, 2800, 90, 10)} {
		r.Time, r.Healthy, r.Mode = day(r.Time.Day()), r.Figures[0].Value > 3000, "full"
		if _, err := render.SaveNode(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	h, err := render.LoadNodeHistory(dir, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.Current != "f1" || len(h.Records) != 4 || h.Others["f0"] != 1 {
		t.Fatalf("history %+v", h)
	}
	var b bytes.Buffer
	if err := h.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	first := strings.Index(page, "The newest run is worse")
	if first < 0 || first > strings.Index(page, "<svg") || !strings.Contains(page, "20% below its own median") || !strings.Contains(page, "grows at 9 per GB") {
		t.Error("the page must open on what got worse")
	}
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("%d plots, want 2 (copy, counters)", n)
	}
	golden.Check(t, "node-history.html.golden", b.Bytes())
	if _, err := render.LoadNodeHistory(dir, "node-2"); err == nil || !strings.Contains(err.Error(), "keeps no node node-2") {
		t.Errorf("another node: %v", err)
	}
}
