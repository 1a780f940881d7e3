package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"collbench/engine"
	"collbench/results"
)

// TestBadInputEveryCommand walks the bad-input table through every command:
// exit 2, one line on stderr in the user's words (no Go internals), nothing
// on stdout, nothing written or replaced in the fixture directory.
func TestBadInputEveryCommand(t *testing.T) {
	if len(badInputCases) < 149 {
		t.Fatalf("only %d bad-input cases: the table must keep at least 149", len(badInputCases))
	}
	dir := t.TempDir()
	good := writeGoodResult(t, dir)
	files := map[string]string{
		"a.json":             good,
		"empty.json":         "",
		"list.json":          "[1, 2]",
		"object.json":        `{"schema": "x", "something": 1}`,
		"nokind.json":        `{"something": 1}`,
		"wrongfield.json":    `{"schema": "collbench/result", "schema_version": 1, "results": "x"}`,
		"wrongnumber.json":   `{"schema": "collbench/result", "schema_version": 1, "results": [{"collective": "allreduce", "size_bytes": "8"}]}`,
		"cut.json":           good[:len(good)/2],
		"broken.json":        `{"schema": "collbench/result" "x": 1}`,
		"notes.txt":          "# my notes\nnothing measured here\n",
		"oldlog.txt":         "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n        1024           256   float     sum    20.10    0.05    0.04  0e+00    20.10    0.05    0.04  0e+00\n",
		"suite.yaml":         "suites:\n  - collectives: [allreduce]\n    sizes: \"8\"\n",
		"empty.yaml":         "",
		"bad.yaml":           "x: [\n",
		"badtype.yaml":       "iterations: abc\nsuites:\n  - collectives: [allreduce]\n",
		"badlist.yaml":       "suites:\n  - collectives: 5\n",
		"unknownkey.yaml":    "suites:\n  - colectives: [allreduce]\n",
		"cluster-key.yaml":   "hosts: 4\nnic:\n  speed: 50\n",
		"cluster-host.yaml":  "hosts: 4\nfaults:\n  - kind: slow-nic\n    host: 7\n    gpu: 0\n    factor: 0.5\n",
		"cluster-speed.yaml": "hosts: 4\nnvlink:\n  gbytes_per_s: -340\n",
		"counters.yaml":      "doctor:\n  counters:\n    default:\n      nvlink_crc: {per_gb: 1}\n",
		"counters-neg.yaml":  "doctor:\n  counters:\n    classes:\n      gpu:NVIDIA H200:\n        nvlink_crc_data: {per_gb: -1}\n",
		"history.yaml":       "doctor:\n  history:\n    drop: 2\n",
		"norows.json":        variant(t, good, func(d *results.Document) { d.Results = nil }),
		"gather.json":        variant(t, good, func(d *results.Document) { setRows(d, func(r *results.Row) { r.Collective = "allgather" }) }),
		"double.json":        variant(t, good, func(d *results.Document) { setRows(d, func(r *results.Row) { r.DType = "double" }) }),
		"negsize.json":       variant(t, good, func(d *results.Document) { d.Results[0].SizeBytes = -8 }),
		"negtime.json":       variant(t, good, func(d *results.Document) { d.Results[len(d.Results)-1].OutOfPlace.TimeUS = -1 }),
		"doctor.json":        `{"schema": "collbench/doctor", "schema_version": 1, "healthy": true, "mode": "quick", "ranks": 1, "hosts": ["h"], "findings": [], "plan": [], "completed": []}`,
		"doctor-new.json":    `{"schema": "collbench/doctor", "schema_version": 7, "healthy": true}`,
	}
	// Node histories holding a record of a newer collbench, and one from
	// another host.
	for name, body := range map[string]string{
		"hist-new/node-1/abc/20260101T000000Z.json":   `{"kind": "collbench/node-history", "schema": 99, "host": "node-1", "fingerprint": "abc"}`,
		"hist-other/node-1/abc/20260101T000000Z.json": `{"kind": "collbench/node-history", "schema": 1, "host": "node-2", "fingerprint": "abc"}`,
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
	// Files larger than collbench reads: sparse, so they cost no disk.
	for name, size := range map[string]int64{"huge.json": 3 << 30, "huge.yaml": 64 << 20} {
		fh, err := os.Create(filepath.Join(dir, name)) //nolint:gosec // test files in the test's own temporary directory
		if err != nil {
			t.Fatal(err)
		}
		if err := fh.Truncate(size); err != nil {
			t.Fatal(err)
		}
		_ = fh.Close()
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	before := listTree(t, dir)
	seen := map[string]bool{}
	for _, c := range badInputCases {
		key := c.env + " " + c.args
		if seen[key] {
			t.Errorf("%s: listed twice", key)
		}
		seen[key] = true
		var args []string
		for _, a := range strings.Fields(c.args) {
			if a == "''" {
				a = ""
			}
			args = append(args, strings.ReplaceAll(a, "@", dir))
		}
		f, out, errOut := testFactory()
		if c.env != "" {
			env := f.Environ()
			for _, kv := range strings.Fields(c.env) {
				env = append(env, strings.ReplaceAll(kv, "@", dir))
			}
			f.Environ = func() []string { return env }
		}
		code := run(t, f, args...)
		msg := errOut.String()
		label := strings.TrimSpace(c.env + " collbench " + c.args)
		if code != engine.ExitUsage {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", label, code, msg)
		}
		if out.Len() != 0 {
			t.Errorf("%s: printed on stdout: %q", label, out)
		}
		if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "collbench: ") {
			t.Errorf("%s: want one line on stderr, got %q", label, msg)
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: stderr %q does not say %q", label, msg, c.want)
		}
		if m := goInternals.FindString(strings.ReplaceAll(msg, dir, "DIR")); m != "" {
			t.Errorf("%s: stderr %q names Go internals (%q)", label, msg, m)
		}
		if after := listTree(t, dir); after != before {
			t.Fatalf("%s: wrote or replaced files:\nbefore %s\nafter  %s", label, before, after)
		}
	}
}

// writeGoodResult measures a tiny run and returns its JSON document.
func writeGoodResult(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "good.json")
	f, _, errOut := testFactory()
	if code := run(t, f, "allreduce", "--sizes", "8,1K", "-n", "2", "-w", "0", "-q", "-o", path); code != 0 {
		t.Fatalf("the good run failed: %s", errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// variant is the good results file changed by edit.
func variant(t *testing.T, good string, edit func(*results.Document)) string {
	t.Helper()
	d, err := results.Read(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	edit(d)
	var b strings.Builder
	if err := results.Write(&b, d); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func setRows(d *results.Document, f func(*results.Row)) {
	for i := range d.Results {
		f(&d.Results[i])
	}
}

// listTree is every path under dir with its size, mode and time.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %v %d", strings.TrimPrefix(p, dir), fi.Size(), fi.Mode(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "; ")
}
