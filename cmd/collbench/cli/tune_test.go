package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"collbench/engine"
	"collbench/tune"
	"collbench/tunefile"
)

// TestTuneAcrossProcesses tunes allreduce on the cpu backend in three
// processes (a folded rank for recursive doubling): every size has the
// default (the ring, on 3 ranks) and recursive doubling measured and
// verified, the ring not measured again as a cell of its own (two cells of
// one algorithm could differ by chance into a gain), the JSON holds every
// cell, the tuner file reads back in the cpu backend's vocabulary, and
// --check with that file measures each size the file covers against the
// default.
func TestTuneAcrossProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	js, csv := filepath.Join(dir, "tune.json"), filepath.Join(dir, "tuner.csv")
	code, out, errOut := launchSelf(t, "-n", "3", "--", "tune", "--backend", "cpu", "--sizes", "8,64K,1M", "-n", "2", "-w", "1",
		"--repeats", "3", "--budget", "60s", "-o", js, "--tuner-file", csv)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep := readJSON[tune.Report](t, js)
	if rep.Schema != tune.Schema || rep.Ranks != 3 || !rep.Complete || len(rep.Collectives) != 1 || len(rep.Collectives[0].Results) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Collectives[0].Results {
		names := map[string]bool{}
		for _, c := range r.Cells {
			names[c.Choice.String()] = len(c.TimesUS) > 0
		}
		if len(names) != 2 || !names["default"] || !names["recursive_doubling/tcp"] {
			t.Errorf("%d B: cells %v, want the default and recursive doubling, each measured", r.Size, names)
		}
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "ring/tcp is what the default runs at 3 of the sizes") {
		t.Errorf("notes %q", rep.Notes)
	}
	if !strings.Contains(out, "## allreduce on 3 ranks (cpu backend)") {
		t.Errorf("no table:\n%s", out)
	}
	f, err := os.Open(csv) //nolint:gosec // G304: the test's own file
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := tunefile.ReadFor(f, csv, tunefile.CPU)
	if err != nil && !strings.Contains(err.Error(), "no entries") {
		t.Fatalf("the tuner file does not read back: %v", err)
	}
	if len(es) != len(rep.Entries()) {
		t.Errorf("the file has %d lines, the report %d", len(es), len(rep.Entries()))
	}

	// --check: a file that forces recursive doubling up to 64 KiB.
	mine := filepath.Join(dir, "mine.csv")
	if err := os.WriteFile(mine, []byte("allreduce,0,65536,recursive_doubling,tcp,-1,-1,-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = launchSelf(t, "-n", "3", "--", "tune", "--backend", "cpu", "--sizes", "8,64K,1M", "-n", "2", "-w", "1",
		"--repeats", "3", "--check", mine, "-o", js)
	if code != 0 && !strings.Contains(errOut, "slower than the default") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep = readJSON[tune.Report](t, js)
	rs := rep.Collectives[0].Results
	if rep.Check != mine || len(rs) != 3 || len(rs[0].Cells) != 2 || len(rs[1].Cells) != 2 || len(rs[2].Cells) != 1 {
		t.Fatalf("check report %+v", rep)
	}
	if rs[0].Cells[1].Choice.Algorithm != "recursive_doubling" || len(rs[0].Cells[1].TimesUS) != tune.MinPairs {
		t.Errorf("8 B: the file's choice %+v", rs[0].Cells[1])
	}
	if !strings.Contains(out, "no line of the file covers this size") {
		t.Errorf("1 MiB is outside the file, and the table does not say so:\n%s", out)
	}
}

// TestTuneBudgetCutsTheSearch: a budget far too short for the sizes ends
// the search with what it measured, says so, and exits 0.
func TestTuneBudgetCutsTheSearch(t *testing.T) {
	t.Parallel()
	js := filepath.Join(t.TempDir(), "tune.json")
	code, out, errOut := launchSelf(t, "-n", "2", "--", "tune", "--backend", "cpu", "--sizes", "8:64M:x2", "-n", "2", "-w", "1",
		"--budget", "1s", "-o", js, "-q")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep := readJSON[tune.Report](t, js)
	if rep.Complete || len(rep.Collectives) != 1 || len(rep.Collectives[0].Results) == 0 || len(rep.Collectives[0].Results) >= 24 {
		t.Fatalf("a 1 s budget over 24 sizes: complete %v, %d sizes kept", rep.Complete, len(rep.Collectives[0].Results))
	}
}

// TestTuneBadInput: each refusal is one line and exit 2.
func TestTuneBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tune", "--backend", "cpu", "--budget", "0s"}, "--budget 0s"},
		{[]string{"tune", "--backend", "cpu", "--check"}, "needs an argument"},
		{[]string{"tune", "--backend", "cpu", "--sizes", "1Q"}, "1Q"},
		{[]string{"tune", "--backend", "cpu"}, "nothing to tune"},
	} {
		f, outB, errB := testFactory()
		code := run(t, f, c.args...)
		out, errOut := outB.String(), errB.String()
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q (want one line with %q)\n%s", c.args, code, errOut, c.want, out)
		}
	}
	for _, c := range []struct{ body, want string }{
		{"allreduce,0,100,tree,ll,-1,1,4\n", `unknown algorithm "tree" for the cpu backend`},
		{"allreduce,0,100,ring\n", "4 fields"},
		{"allreduce,0,100,ring,tcp,-1,-1,-1\nallreduce,50,200,recursive_doubling,tcp,-1,-1,-1\n", "overlap"},
	} {
		code, out, errOut := launchSelf(t, "-n", "2", "--", "tune", "--backend", "cpu", "--check", write("f.csv", c.body))
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q (want %q)\n%s", c.body, code, errOut, c.want, out)
		}
	}
}

// TestTuneCtrlCKeepsWhatWasMeasured interrupts a long search once its
// first sizes are on disk: it exits 130 promptly, the JSON holds every
// size measured (a valid document, marked incomplete), and no rank is
// left.
func TestTuneCtrlCKeepsWhatWasMeasured(t *testing.T) {
	t.Parallel()
	js := filepath.Join(t.TempDir(), "tune.json")
	p := startSelf(t, nil, "launch", "-n", "2", "--", "tune", "--backend", "cpu", "--sizes", "8:256M:x2", "-n", "5", "-w", "1",
		"--budget", "10m", "-o", js, "-q")
	read := func() *tune.Report {
		data, err := os.ReadFile(js)
		if err != nil {
			return nil
		}
		var rep tune.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatalf("the JSON on disk is not a valid document at some instant: %v", err)
		}
		return &rep
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if rep := read(); rep != nil && len(rep.Collectives) > 0 && len(rep.Collectives[0].Results) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sizes on disk after 60 s: %s", p.errb)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	sent := time.Now()
	code := p.wait(t, 30*time.Second)
	if code != engine.ExitInterrupted {
		t.Errorf("exit %d, want %d: %s", code, engine.ExitInterrupted, p.errb)
	}
	if took := p.ended.Sub(sent); took > 5*time.Second {
		t.Errorf("exited %v after SIGINT", took)
	}
	rep := read()
	if rep == nil || rep.Complete || len(rep.Collectives[0].Results) < 3 || len(rep.Collectives[0].Results) >= 26 {
		t.Fatalf("after SIGINT: %+v", rep)
	}
	t.Logf("%d sizes kept; exit %d %v after SIGINT", len(rep.Collectives[0].Results), code, p.ended.Sub(sent).Round(time.Millisecond))
	noneLeft(t)
}

// readJSON reads a JSON document the test had written (tune's,
// determinism's); it must be a valid one.
func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	var v T
	data, err := os.ReadFile(path) //nolint:gosec // G304: the test's own file
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestTuneFromAWatchRecord: tune --from reads what a job issued from
// collbench watch's record and tunes exactly that: the collectives a
// tuner chooses for, their sizes in collbench's terms (allgather counts
// every rank's part) and the most called type; what it leaves out is said.
// A record with no collectives, of another rank count, or a file that is
// no record is refused, exit 2.
func TestTuneFromAWatchRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, ops string) string {
		p := filepath.Join(dir, name)
		body := `{"schema": "collbench/watch", "started": "2026-11-28T00:00:00Z", "updated": "2026-11-28T00:01:00Z", "findings": [], "standing": [], "findings_total": 0,
			"counts": {"processes": 3, "summaries": 30, "summaries_dropped": 0, "operations_judged": 10, "links_judged": 0, "links_received": 0, "communicators": 1, "operations": [` + ops + `]}}`
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := write("rec.json", `{"communicator": "00000000000000aa", "ranks": 3, "func": "AllReduce", "dtype": "ncclFloat32", "count": 1024, "calls": 600},
		{"communicator": "00000000000000aa", "ranks": 3, "func": "AllReduce", "dtype": "ncclFloat32", "count": 65536, "calls": 10},
		{"communicator": "00000000000000aa", "ranks": 3, "func": "Send", "dtype": "ncclFloat32", "count": 16, "calls": 5}`)
	js := filepath.Join(dir, "tune.json")
	code, out, errOut := launchSelf(t, "-n", "3", "--", "tune", "--backend", "cpu", "--from", rec, "-n", "2", "-w", "1", "--repeats", "3", "--budget", "60s", "-o", js)
	if code != 0 || !strings.Contains(errOut, "left out, with no choice to tune: Send ncclFloat32") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep := readJSON[tune.Report](t, js)
	var sizes []int64
	for _, r := range rep.Collectives[0].Results {
		sizes = append(sizes, r.Size)
	}
	if len(rep.Collectives) != 1 || rep.Collectives[0].Name != "allreduce" || !slices.Equal(sizes, []int64{4096, 262144}) || !rep.ExactSizes {
		t.Errorf("tuned %d collectives, %s at %v; want allreduce at the job's 4 KiB and 256 KiB", len(rep.Collectives), rep.Collectives[0].Name, sizes)
	}
	empty := write("empty.json", "")
	notRec := filepath.Join(dir, "x.json")
	if err := os.WriteFile(notRec, []byte(`{"schema": "collbench/result"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "2", "--", "tune", "--backend", "cpu", "--from", rec}, "the job's communicator had 3 ranks, this world has 2"},
		{[]string{"-n", "3", "--", "tune", "--backend", "cpu", "--from", empty}, "holds no collectives"},
		{[]string{"-n", "3", "--", "tune", "--backend", "cpu", "--from", notRec}, "is not a record of collbench watch"},
		{[]string{"-n", "3", "--", "tune", "--backend", "cpu", "--from", rec, "--sizes", "8"}, "--from and --sizes cannot go together"},
	} {
		code, out, errOut := launchSelf(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q\n%s\n%s", c.args, code, c.want, out, errOut)
		}
	}
}

// TestCheckFileForAnotherRankCount: a tuner file whose every line is for
// another rank count (made on another machine) is refused by tune --check
// and determinism --check with one line naming the file and both counts,
// exit 2, before anything is measured.
func TestCheckFileForAnotherRankCount(t *testing.T) {
	t.Parallel()
	csv := filepath.Join(t.TempDir(), "t8.csv")
	body := "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\nallreduce,1,1048576,recursive_doubling,tcp,-1,-1,8,-1,-1\n"
	if err := os.WriteFile(csv, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "--check " + csv + ": its lines are for 8 ranks and this world has 2"
	for _, cmd := range [][]string{
		{"tune", "--backend", "cpu", "--check", csv, "--sizes", "8:1K", "--budget", "10s"},
		{"determinism", "--backend", "cpu", "--check", csv, "--sizes", "8:1K", "-q"},
	} {
		code, out, errOut := launchSelf(t, append([]string{"-n", "2", "--"}, cmd...)...)
		if code != 2 || !strings.Contains(errOut, want) || strings.Contains(out, "|") {
			t.Errorf("%v: exit %d, want 2 and %q\n%s\n%s", cmd, code, want, out, errOut)
		}
	}
}
