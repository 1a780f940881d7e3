package pagecheck

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"collbench/backend/sim/cluster"
	"collbench/doctor"
	"collbench/engine"
	"collbench/measure"
	"collbench/report"
	"collbench/results"
)

// The window every page is opened in, and how far down the verdict must
// be seen without scrolling.
const (
	windowWidth  = 1280
	windowHeight = 900
	verdictBy    = 800
)

// shotsDir is where the screenshots go: $COLLBENCH_SCREENSHOTS, else a
// folder under the system's temporary directory.
func shotsDir(t *testing.T) string {
	dir := os.Getenv("COLLBENCH_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "collbench-page-screenshots")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bench runs a short verified sweep on the cpu backend in this process,
// from 8 B to maxSize.
func bench(t *testing.T, ranks int, maxSize int64) *results.Document {
	t.Helper()
	sys := &engine.System{Stderr: &bytes.Buffer{}, Args: []string{"collbench", "sweep"},
		Hostname: func() (string, error) { return "testhost", nil },
		Now:      func() time.Time { return time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC) },
		Environ:  func() []string { return nil },
	}
	b := engine.DefaultBench()
	b.Backend, b.Ranks, b.Tool = "cpu", ranks, "test"
	b.Plan.Collectives = []measure.Collective{measure.AllReduce, measure.AllGather}
	b.Plan.Sizes = nil
	for _, size := range []int64{8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20} {
		if size <= maxSize {
			b.Plan.Sizes = append(b.Plan.Sizes, size)
		}
	}
	b.Plan.Iters, b.Plan.Warmup = 3, 1
	doc, err := sys.RunBench(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// slower is d with every row from 1 MiB up a third slower: a regression.
func slower(d *results.Document) *results.Document {
	c := *d
	c.Results = nil
	for _, r := range d.Results {
		if r.SizeBytes >= 1<<20 {
			for _, h := range []**results.Half{&r.OutOfPlace, &r.InPlace} {
				if *h != nil {
					x := **h
					x.TimeUS *= 1.5
					x.AlgBW /= 1.5
					x.BusBW /= 1.5
					*h = &x
				}
			}
		}
		c.Results = append(c.Results, r)
	}
	return &c
}

// simulated is doctor's report on a cluster model with faults planted.
func simulated(t *testing.T, hosts int, faults ...cluster.Fault) *doctor.Report {
	t.Helper()
	m := cluster.Defaults()
	m.Hosts, m.Faults = hosts, faults
	m.Fabric.HostsPerLeaf = max(hosts/2, 1)
	rep, err := engine.Simulate(context.Background(), doctor.Simulation{Model: &m, Knobs: doctor.Knobs{Quick: true}})
	var cf *engine.CheckFailedError
	if err != nil && !errors.As(err, &cf) {
		t.Fatal(err)
	}
	return rep
}

func ip(v int) *int { return &v }

// browserOrSkip is the Chromium to drive; without one the test is skipped
// with one line, or fails where REQUIRE_BROWSER=1 (CI).
func browserOrSkip(t *testing.T) string {
	t.Helper()
	browser, err := FindBrowser()
	if err != nil {
		if os.Getenv("REQUIRE_BROWSER") == "1" {
			t.Fatal(err)
		}
		t.Skip("browser test skipped: " + err.Error())
	}
	return browser
}

// page is one report as a person opens it.
type page struct {
	name string
	// write writes the page; culprit says the page must mark one.
	write   func(t *testing.T, w *bytes.Buffer) error
	culprit bool
	// verdict is a word the verdict line must hold.
	verdict string
}

// TestReportPagesInABrowser opens each kind of report in headless
// Chromium at 1,280 x 900 and checks what a reader sees: no console error,
// every plot drawn with a size, nothing wider than the window, the verdict
// within the first 800 px, and the culprit marked where there is one.
func TestReportPagesInABrowser(t *testing.T) {
	browser := browserOrSkip(t)
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	one, eight, many := bench(t, 1, 4<<20), bench(t, 8, 4<<20), bench(t, 64, 256<<10)
	pages := []page{
		{name: "bench-1-rank", verdict: "verified", write: func(t *testing.T, w *bytes.Buffer) error {
			return report.WriteHTML(w, report.HTMLInput{Title: "collbench report: one.json", Runs: []report.Series{{Label: "one.json", Doc: one, Path: "/data/runs/one.json"}}})
		}},
		{name: "bench-8-ranks", verdict: "verified", write: func(t *testing.T, w *bytes.Buffer) error {
			return report.WriteHTML(w, report.HTMLInput{Title: "collbench report: eight.json", Runs: []report.Series{{Label: "eight.json", Doc: eight, Path: "/data/runs/eight.json"}}})
		}},
		{name: "bench-64-ranks", verdict: "verified", write: func(t *testing.T, w *bytes.Buffer) error {
			return report.WriteHTML(w, report.HTMLInput{Title: "collbench report: many.json", Runs: []report.Series{{Label: "many.json", Doc: many, Path: "/data/runs/many.json"}}})
		}},
		{name: "compare-regression", verdict: "FAIL", write: func(t *testing.T, w *bytes.Buffer) error {
			cur := slower(eight)
			c, err := report.Compare(eight, cur, "baseline.json", "today.json", report.DefaultThresholds())
			if err != nil {
				return err
			}
			return report.WriteHTML(w, report.HTMLInput{Title: "collbench report: today.json against baseline.json",
				Runs: []report.Series{{Label: "today.json", Doc: cur, Path: "/data/runs/today.json"}}, Baseline: &report.Series{Label: "baseline.json", Doc: eight, Path: "/data/baseline.json"}, Comparison: c})
		}},
		{name: "doctor-healthy", verdict: "Healthy", write: func(t *testing.T, w *bytes.Buffer) error {
			return doctor.WriteHTML(simulated(t, 1), w)
		}},
		{name: "doctor-slow-gpu", verdict: "FAIL", culprit: true, write: func(t *testing.T, w *bytes.Buffer) error {
			return doctor.WriteHTML(simulated(t, 1, cluster.Fault{Kind: cluster.SlowGPU, Host: ip(0), GPU: ip(3), Factor: 0.5}), w)
		}},
		{name: "doctor-64-ranks-slow-nvlink", verdict: "FAIL", culprit: true, write: func(t *testing.T, w *bytes.Buffer) error {
			return doctor.WriteHTML(simulated(t, 8, cluster.Fault{Kind: cluster.SlowNVLink, Host: ip(5), Factor: 0.4}), w)
		}},
		{name: "doctor-64-ranks-slow-nic", verdict: "FAIL", culprit: true, write: func(t *testing.T, w *bytes.Buffer) error {
			return doctor.WriteHTML(simulated(t, 8, cluster.Fault{Kind: cluster.SlowNIC, Host: ip(2), GPU: ip(6), Factor: 0.3}), w)
		}},
	}
	dir := shotsDir(t)
	t.Logf("screenshots of the pages: %s", dir)
	for _, pg := range pages {
		t.Run(pg.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := pg.write(t, &b); err != nil {
				t.Fatal(err)
			}
			html := filepath.Join(dir, pg.name+".html")
			if err := os.WriteFile(html, b.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := Open(context.Background(), html, Options{Browser: browser, Width: windowWidth, Height: windowHeight})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, pg.name+".png"), p.Screenshot, 0o600); err != nil {
				t.Fatal(err)
			}
			checkPage(t, p, strings.HasPrefix(pg.name, "bench") || strings.HasPrefix(pg.name, "compare"))
			if !strings.Contains(p.VerdictText, pg.verdict) {
				t.Errorf("the verdict reads %q; want it to say %q", p.VerdictText, pg.verdict)
			}
			if pg.culprit && p.Culprits == 0 {
				t.Error("the culprit is not marked on the page")
			}
			if !pg.culprit && p.Culprits > 0 {
				t.Errorf("%d parts marked as culprits on a page without one", p.Culprits)
			}
			if strings.Contains(p.Title, "/data/") {
				t.Errorf("the title %q holds a path: short names only", p.Title)
			}
			t.Logf("%s: %d plot(s), verdict at %.0f px, %d culprit cell(s), page %.0f px wide: %s", pg.name, len(p.Plots), p.Verdict.Top, p.Culprits, p.PageWidth, p.VerdictText)
		})
	}
}

// TestCheckerSeesWhatIsWrong: the checker itself must see each defect it
// is there to catch, on a page built to have them all.
func TestCheckerSeesWhatIsWrong(t *testing.T) {
	browser := browserOrSkip(t)
	bad := `<!DOCTYPE html><html><head><title>bad</title></head><body>
<div style="width:2000px;height:1000px">too wide, and the verdict below the fold</div>
<p class="verdict">FAIL</p>
<svg width="0" height="0"></svg>
<script>console.error("planted error"); throw new Error("planted exception");</script>
</body></html>`
	path := filepath.Join(t.TempDir(), "bad.html")
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Open(context.Background(), path, Options{Browser: browser, Width: windowWidth, Height: windowHeight})
	if err != nil {
		t.Fatal(err)
	}
	errs := strings.Join(p.Errors, "\n")
	if !strings.Contains(errs, "planted error") || !strings.Contains(errs, "planted exception") {
		t.Errorf("console errors not seen: %q", errs)
	}
	if p.PageWidth <= p.Window || p.Widest == "" {
		t.Errorf("a 2,000 px element not seen: page %.0f px in a %.0f px window, widest %q", p.PageWidth, p.Window, p.Widest)
	}
	if p.Verdict.Top < verdictBy {
		t.Errorf("a verdict at %.0f px read as within the first %d px", p.Verdict.Top, verdictBy)
	}
	if len(p.Plots) != 1 || p.Plots[0].Width != 0 {
		t.Errorf("a plot of no size not seen: %+v", p.Plots)
	}
	if p.Culprits != 0 {
		t.Errorf("%d culprits on a page with none", p.Culprits)
	}
}

// checkPage fails t on what no page may show: a console error, a plot of
// no size, anything wider than the window, a verdict below the first
// verdictBy px; plots says the page must have a plot.
func checkPage(t *testing.T, p *Page, plots bool) {
	t.Helper()
	for _, e := range p.Errors {
		t.Errorf("console error: %s", e)
	}
	for i, box := range p.Plots {
		if box.Width <= 0 || box.Height <= 0 || p.Shapes[i] == 0 {
			t.Errorf("plot %d drawn at %.0f x %.0f px with %d shapes", i, box.Width, box.Height, p.Shapes[i])
		}
	}
	if plots && len(p.Plots) == 0 {
		t.Error("no plot on the page")
	}
	if p.PageWidth > p.Window || p.Widest != "" {
		t.Errorf("the page is %.0f px wide in a %.0f px window (widest: %s)", p.PageWidth, p.Window, p.Widest)
	}
	if p.Verdict.Height == 0 || p.Verdict.Bottom() > verdictBy {
		t.Errorf("the verdict is at %.0f-%.0f px; it must be within the first %d px", p.Verdict.Top, p.Verdict.Bottom(), verdictBy)
	}
}

// TestGivenPages checks the pages named in $COLLBENCH_PAGES (separated by
// spaces; make pages PAGES="a.html b.html"), such as reports of real runs,
// and writes their screenshots beside the others.
func TestGivenPages(t *testing.T) {
	given := strings.Fields(os.Getenv("COLLBENCH_PAGES"))
	if len(given) == 0 {
		t.Skip("no pages given in COLLBENCH_PAGES")
	}
	browser, err := FindBrowser()
	if err != nil {
		t.Fatal(err)
	}
	dir := shotsDir(t)
	for _, path := range given {
		t.Run(filepath.Base(path), func(t *testing.T) {
			p, err := Open(context.Background(), path, Options{Browser: browser, Width: windowWidth, Height: windowHeight})
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
			if err := os.WriteFile(filepath.Join(dir, name+".png"), p.Screenshot, 0o600); err != nil {
				t.Fatal(err)
			}
			checkPage(t, p, false)
			t.Logf("%s: %d plot(s), verdict at %.0f px, %d culprit cell(s), page %.0f px wide: %s", path, len(p.Plots), p.Verdict.Top, p.Culprits, p.PageWidth, p.VerdictText)
		})
	}
}
