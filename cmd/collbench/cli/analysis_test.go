package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"collbench/backend/cpu"
	"collbench/doctor"
	"collbench/engine"
	"collbench/measure"
	"collbench/results"
)

func writeDoc(t *testing.T, path string, scale float64) {
	t.Helper()
	writeDocSpread(t, path, scale, 0)
}

// writeDocSpread writes writeDoc's rows, each with three cycles spread by
// ±spread around its time.
func writeDocSpread(t *testing.T, path string, scale, spread float64) {
	t.Helper()
	d := &results.Document{Schema: results.Schema, SchemaVersion: 1, Tool: results.Tool{Name: "collbench", Version: "t"}}
	for _, s := range []int64{8, 4 << 20} {
		h := &results.Half{TimeUS: 100 * scale, BusBW: 50 / scale}
		if spread > 0 {
			ts := []float64{h.TimeUS * (1 - spread), h.TimeUS, h.TimeUS * (1 + spread)}
			h.Cycles = &results.CycleStats{N: 3, TimesUS: ts, TimeMinUS: ts[0], TimeMaxUS: ts[2], BusBWMin: h.BusBW / (1 + spread), BusBWMax: h.BusBW / (1 - spread)}
		}
		d.Results = append(d.Results, results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: s, OutOfPlace: h})
	}
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := results.Write(fh, d); err != nil {
		t.Fatal(err)
	}
}

func TestCompareExitCodes(t *testing.T) {
	dir := t.TempDir()
	base, same, slow := filepath.Join(dir, "base.json"), filepath.Join(dir, "same.json"), filepath.Join(dir, "slow.json")
	writeDoc(t, base, 1)
	writeDoc(t, same, 1.01)
	writeDoc(t, slow, 1.5)
	// Cycles spread by ±10% cannot judge a 15% change: inconclusive, exit 5.
	wideBase, wideSlow := filepath.Join(dir, "wide-base.json"), filepath.Join(dir, "wide-slow.json")
	writeDocSpread(t, wideBase, 1, 0.1)
	writeDocSpread(t, wideSlow, 1.15, 0.1)
	foreign := filepath.Join(dir, "foreign.json")
	if err := os.WriteFile(foreign, []byte(`{"hello": "world"}`), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	future := filepath.Join(dir, "future.json")
	if err := os.WriteFile(future, []byte(`{"schema": "collbench/result", "schema_version": 9}`), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"schema": "collbench/result", "schema_version": 1, "results": [{"collective": "alltoall", "dtype": "int8", "op": "none", "root": -1, "size_bytes": 8, "out_of_place": {"time_us": 1}}]}`), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"compare", base, same}, 0, "PASS"},
		{[]string{"compare", base, slow}, 1, "regressed"},
		{[]string{"compare", base, slow, "--busbw-threshold", "60", "--time-threshold", "60"}, 0, "PASS"},
		{[]string{"compare", base, slow, "--format", "markdown"}, 1, "### collbench: FAIL"},
		{[]string{"compare", base, slow, "--format", "junit"}, 1, "<testsuites"},
		{[]string{"compare", wideBase, wideSlow}, 5, "INCONCLUSIVE (the runs' own spread hides changes below 20%: 1 part(s) could not be judged)"},
		{[]string{"compare", wideBase, wideSlow, "--format", "junit"}, 5, "<skipped message=\"1 of 1 rows inconclusive"},
		{[]string{"compare", base, foreign}, 2, "a JSON object without \"schema\" (collbench)"},
		{[]string{"compare", base, future}, 2, "schema version 9 is not supported"},
		{[]string{"compare", base, other}, 2, "no row in common"},
		{[]string{"compare", base, filepath.Join(dir, "nope.json")}, 2, "cannot read"},
		{[]string{"compare", base}, 2, "needs two files"},
		{[]string{"compare", base, same, "--format", "pdf"}, 2, "unknown --format"},
		{[]string{"compare", base, same, "--band-edge", "1Q"}, 2, "--band-edge"},
		{[]string{"compare", "../../../results/testdata/nccl-tests-v3.json", same}, 1, "missing"},
	}
	for _, c := range cases {
		f, out, errOut := testFactory()
		code := run(t, f, c.args...)
		if code != c.code || !strings.Contains(out.String()+errOut.String(), c.want) {
			t.Errorf("%v: exit %d (want %d), output %q %q (want %q)", c.args[1:], code, c.code, out, errOut, c.want)
		}
	}
}

func TestBaselineReportAndPlotCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	writeDoc(t, a, 1)
	writeDoc(t, b, 1.2)
	base := filepath.Join(dir, "base.json")
	f, _, errOut := testFactory()
	if code := run(t, f, "baseline", "make", a, b, "-o", base); code != 0 {
		t.Fatalf("baseline make: %d %s", code, errOut)
	}
	fh, _ := os.Open(base)
	d, err := results.Read(fh)
	fh.Close()
	if err != nil || d.Baseline == nil || d.Baseline.Runs != 2 || d.Results[1].OutOfPlace.Spread == 0 {
		t.Fatalf("baseline: %v %+v", err, d)
	}
	html := filepath.Join(dir, "r.html")
	f, _, errOut = testFactory()
	if code := run(t, f, "report", b, "--baseline", base, "-o", html); code != 0 {
		t.Fatalf("report: %d %s", code, errOut)
	}
	page, _ := os.ReadFile(html)
	if !strings.Contains(string(page), "<svg") || !strings.Contains(string(page), "Every compared row") {
		t.Fatalf("report lacks plots or comparison")
	}
	if !strings.Contains(string(page), "<title>collbench report: b.json against base.json</title>") {
		t.Errorf("the title names the runs by their short names: %s", regexp.MustCompile(`<title>.*</title>`).FindString(string(page)))
	}
	if !strings.Contains(string(page), filepath.Join(dir, "b.json")) {
		t.Error("the page does not give the run's full path")
	}
	for _, ext := range []string{"svg", "png"} {
		f, _, errOut = testFactory()
		p := filepath.Join(dir, "p."+ext)
		if code := run(t, f, "plot", a, b, "-o", p); code != 0 {
			t.Fatalf("plot %s: %d %s", ext, code, errOut)
		}
		if st, err := os.Stat(p); err != nil || st.Size() < 1000 {
			t.Fatalf("plot %s: %v", ext, err)
		}
	}
	for _, args := range [][]string{{"report", a}, {"plot", a, "-o", "x.gif"}, {"plot", a, "-o", "x.svg", "--kind", "pie"},
		{"plot", a, "-o", "x.svg", "--collective", "bogus"}, {"baseline", "make"}, {"baseline"}, {"run"}, {"run", "--config", "/nope.yaml"}} {
		f, out, errOut := testFactory()
		if code := run(t, f, args...); code != engine.ExitUsage || out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestRunConfigEndToEnd runs a suite twice on the CPU backend and compares
// with a baseline: without a slowdown it passes; with a planted slowdown of
// the large messages (a test-only hook) it fails naming the regressed rows.
// The thresholds are wide because CPU timings on a loaded CI machine are
// noisy: under a heavily loaded -race run a 2 MiB operation was seen to take
// 35 ms, and busbw was seen to drop by 92% between two unchanged runs. So the
// large rows are judged on time with an absolute floor: a row regresses only
// when it is over 11 times slower and also 200 ms slower per operation. The
// planted slowdown of a second per operation clears both by far; scheduling
// noise clears neither.
func TestRunConfigEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "suite.yaml")
	//nolint:gosec // test files in the test's own temporary directory
	if err := os.WriteFile(cfg, []byte(`name: e2e
description: end-to-end test
backend: cpu
ranks: 2
iterations: 2
warmup: 1
check: 1
suites:
  - collectives: [allreduce, allgather]
    sizes: "4K,2M"
    mode: out-of-place
thresholds:
  # A floor of 200 ms: the unchanged run must pass on a loaded CI host
  # under -race, where one stall of a few ms once failed a 4 KiB row;
  # the slowed run adds a second per operation, far above it. 100 %, not
  # more: a loaded host once took 95 ms for the baseline's 2 MiB row,
  # and 1000 % let the slowed row's 1.04 s pass.
  bands:
    - {min_size: 0, metric: time, pct: 100, floor_us: 200000}
    - {min_size: 1M, metric: time, pct: 100, floor_us: 200000}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	f, out, errOut := testFactory()
	if code := run(t, f, "run", "--config", cfg, "--quiet", "--output", outDir); code != 0 {
		t.Fatalf("first run: %d\n%s\n%s", code, out, errOut)
	}
	resultsPath := filepath.Join(dir, "out", "results.json")
	base := filepath.Join(dir, "base.json")
	f, _, _ = testFactory()
	if code := run(t, f, "baseline", "make", resultsPath, "-o", base); code != 0 {
		t.Fatal("baseline make failed")
	}
	f, out, errOut = testFactory()
	if code := run(t, f, "run", "--config", cfg, "--baseline", base, "--output", outDir); code != 0 {
		t.Fatalf("unchanged run should pass: %d\n%s\n%s", code, out, errOut)
	}
	for _, name := range []string{"results.json", "report.html", "comparison.md", "junit.xml", "comparison.txt"} {
		if _, err := os.Stat(filepath.Join(dir, "out", name)); err != nil {
			t.Errorf("%s not written", name)
		}
	}
	f, out, errOut = testFactory()
	f.CPUOptions = cpu.Options{AfterOp: func(rank int, c measure.Call, data []byte) {
		if len(data) >= 1<<20 {
			time.Sleep(time.Second) // far beyond any scheduling noise
		}
	}}
	code := run(t, f, "run", "--config", cfg, "--baseline", base, "--output", outDir)
	if code != engine.ExitCheckFailed {
		t.Fatalf("slowed run: exit %d\n%s\n%s", code, out, errOut)
	}
	s := out.String()
	regressed := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(strings.ReplaceAll(line, "|", " "))
		if len(f) > 8 && f[len(f)-1] == "regressed" {
			regressed[f[0]+" "+f[5]+f[6]] = true
		}
	}
	if !regressed["allreduce 2MiB"] || !regressed["allgather 2MiB"] || regressed["allreduce 4KiB"] || regressed["allgather 4KiB"] {
		t.Errorf("regressed rows %v:\n%s", regressed, s)
	}
	if !strings.Contains(s, "# FAIL (") {
		t.Errorf("no failing verdict:\n%s", s)
	}
	if !strings.Contains(errOut.String(), "run: compare:") {
		t.Errorf("stderr %q", errOut)
	}
}

// TestReportOfADoctorReport: report renders a doctor's JSON report as the
// doctor's page, verdict first.
func TestReportOfADoctorReport(t *testing.T) {
	dir := t.TempDir()
	rep := &doctor.Report{Schema: doctor.Schema, Mode: "quick", Backend: "cpu", Ranks: 2, Hosts: []string{"h1"},
		Findings: []doctor.Finding{{Severity: "FAIL", Stage: "gpu", Part: "rank 1 (h1)", Ranks: []int{1}, Msg: "slow alone"}},
		Pairs:    []doctor.PairFigure{{A: 0, B: 1, Host: "h1", AB: 10, BA: 4}}}
	in, out := filepath.Join(dir, "doctor.json"), filepath.Join(dir, "doctor.html")
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _, errOut := testFactory()
	if code := run(t, f, "report", in, "-o", out); code != 0 {
		t.Fatalf("report of a doctor report: exit %d: %s", code, errOut)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p := string(page)
	if v, m := strings.Index(p, "FAIL rank 1 (h1): slow alone"), strings.Index(p, "<h2"); v < 0 || v > m {
		t.Errorf("the verdict must come first (at %d, first heading at %d)", v, m)
	}
	if !strings.Contains(p, `class="culprit"`) {
		t.Error("the culprit is not outlined")
	}
}

// TestInputsSayWhatWasLeftOut: compare, report and baseline say what they
// did not use or cannot trust. An NCCL benchmark log with two lines cut
// short names them by number; a log from 4x V100 compared with a cpu run
// says the machines differ; one run given twice is named as such, a
// warning in compare and report, a refusal in baseline, as are runs of two
// machines in one baseline.
func TestInputsSayWhatWasLeftOut(t *testing.T) {
	dir := t.TempDir()
	logText, err := os.ReadFile("../../../results/testdata/all_gather_perf.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(logText), "\n")
	var cut []string
	var lost []int
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "4096" || f[0] == "32768") {
			l = l[:len(l)/3] // a line cut short, as by a full disk or a killed tee
			lost = append(lost, i+1)
		}
		cut = append(cut, l)
	}
	if len(lost) != 2 {
		t.Fatalf("the fixture changed: %d lines to cut", len(lost))
	}
	nccl := filepath.Join(dir, "all_gather_perf.log")
	if err := os.WriteFile(nccl, []byte(strings.Join(cut, "\n")), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	cpu := filepath.Join(dir, "cpu.json")
	f, _, errOut := testFactory()
	if code := run(t, f, "allgather", "--sizes", "1K:1M", "-n", "2", "-w", "0", "-q", "-o", cpu); code != 0 {
		t.Fatalf("the cpu run: %d %s", code, errOut)
	}
	f, out, errOut := testFactory()
	run(t, f, "compare", nccl, cpu)
	for _, want := range []string{
		fmt.Sprintf("2 measured lines could not be read and were left out: lines %d, %d", lost[0], lost[1]),
		"the machines differ: the baseline ran on nccl on 4x Tesla V100-SXM2-32GB, the current run on cpu on 4x host memory"} {
		if !strings.Contains(out.String()+errOut.String(), want) {
			t.Errorf("compare does not say %q:\n%s%s", want, out, errOut)
		}
	}
	f, out, errOut = testFactory()
	if code := run(t, f, "compare", cpu, cpu); code != 0 || !strings.Contains(out.String(), "the same run: every row compares with itself") {
		t.Errorf("compare of one run with itself: exit %d\n%s%s", code, out, errOut)
	}
	f, _, errOut = testFactory()
	if code := run(t, f, "report", "-o", filepath.Join(dir, "r.html"), cpu, cpu); code != 0 || !strings.Contains(errOut.String(), "are the same run: the page shows it twice") {
		t.Errorf("report of one run twice: exit %d, stderr %q", code, errOut)
	}
	f, _, errOut = testFactory()
	if code := run(t, f, "baseline", "make", "-o", filepath.Join(dir, "b.json"), nccl); code != 0 || !strings.Contains(errOut.String(), "lines "+fmt.Sprint(lost[0])) {
		t.Errorf("baseline of a log with lines left out: exit %d, stderr %q", code, errOut)
	}
	for _, tc := range []struct {
		runs []string
		want string
	}{
		{[]string{cpu, cpu}, "runs 1 and 2 are the same run (started "},
		{[]string{cpu, nccl}, "runs 1 and 2 come from different machines (cpu on 4x host memory, and nccl on 4x Tesla V100-SXM2-32GB)"},
	} {
		f, out, errOut := testFactory()
		code := run(t, f, append([]string{"baseline", "make", "-o", filepath.Join(dir, "x.json")}, tc.runs...)...)
		msg := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		if code != engine.ExitUsage || out.Len() != 0 || !strings.HasPrefix(msg[len(msg)-1], "collbench: ") || !strings.Contains(msg[len(msg)-1], tc.want) {
			t.Errorf("baseline make %v: exit %d, stderr %q, want %q", tc.runs, code, errOut, tc.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.json")); err == nil {
			t.Errorf("baseline make %v wrote its output", tc.runs)
		}
	}
}

// TestRefusedRunLeavesNoDirectory: a suite refused once its output
// directory was made (its plan too long for --max-time's day) exits 2 and
// leaves no directory behind; one that existed before stays.
func TestRefusedRunLeavesNoDirectory(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "long.yaml")
	if err := os.WriteFile(cfg, []byte("iterations: 99999999999\nsuites:\n  - collectives: [allreduce]\n    sizes: \"8\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, existed := range []bool{false, true} {
		out := filepath.Join(dir, fmt.Sprintf("out-%v", existed))
		if existed {
			if err := os.Mkdir(out, 0o750); err != nil {
				t.Fatal(err)
			}
		}
		f, _, errOut := testFactory()
		if code := run(t, f, "run", "--config", cfg, "--output", out); code != engine.ExitUsage || !strings.Contains(errOut.String(), "would run for at least") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if _, err := os.Stat(out); os.IsNotExist(err) == existed {
			t.Errorf("output directory that existed before: %v; after the refusal: %v", existed, err)
		}
	}
}
