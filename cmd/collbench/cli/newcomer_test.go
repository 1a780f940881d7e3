package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"collbench/engine"
	"collbench/results"
)

// newcomerFiles writes the files the newcomer cases read into dir: two
// small cpu runs, a file that is not a library, and suite configs.
func newcomerFiles(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"a.json", "b.json"} {
		f, _, errOut := testFactory()
		if code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "1K,4K", "-n", "2", "-w", "0", "-q", "-o", filepath.Join(dir, name)); code != 0 {
			t.Fatalf("making %s: exit %d: %s", name, code, errOut)
		}
	}
	files := map[string]string{
		"notalib.so":         "root:x:0:0:root:/root:/bin/bash\n",
		"negative.yaml":      "name: n\nsuites:\n  - collectives: [allreduce]\nwarmup: -1\n",
		"zero-iters.yaml":    "name: z\niterations: 0\nsuites:\n  - collectives: [allreduce]\n",
		"missing-base.yaml":  "name: m\nbackend: cpu\nsuites:\n  - collectives: [allreduce]\n    sizes: 1K\nbaseline: nowhere/base.json\n",
		"zero-warmup.yaml":   "name: w\nbackend: cpu\niterations: 2\nwarmup: 0\ncheck: 0\nsuites:\n  - collectives: [allreduce]\n    sizes: 1K\n    groups: [all, pairs]\n  - collectives: [allgather]\n    sizes: 4K\n",
		"negative-line.yaml": "name: n\nbackend: cpu\niterations: -3\nsuites:\n  - collectives: [allreduce]\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
}

// TestNewcomerBadInputIsOneLine: every input a newcomer mistyped is refused
// before any work with one line on stderr that names the input and what to
// do, nothing on stdout, and the documented exit code.
func TestNewcomerBadInputIsOneLine(t *testing.T) {
	dir := t.TempDir()
	newcomerFiles(t, dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	torchrun := []string{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"}
	cases := []struct {
		name string
		args []string
		env  []string
		code int
		want []string
	}{
		{"empty sizes", []string{"allreduce", "--sizes", ""}, nil, engine.ExitUsage, []string{"--sizes is empty", "leave it out"}},
		{"blank sizes", []string{"allreduce", "--sizes= "}, nil, engine.ExitUsage, []string{"--sizes is empty"}},
		{"empty rank list", []string{"sweep", "--rank-list", ""}, nil, engine.ExitUsage, []string{"--rank-list is empty"}},
		{"preset with an argument", []string{"verify-groups", "--rank-list", "pairs:x"}, nil, engine.ExitUsage, []string{"pairs:x", "pairs takes no argument"}},
		{"rows that move no data", []string{"allreduce", "--sizes", "4", "--dtype", "double"}, nil, engine.ExitUsage, []string{"every row would move no data", "double", "8 B", "larger --sizes"}},
		{"a file that is not a library", []string{"allreduce", "--nccl-lib", p("notalib.so")}, nil, engine.ExitUsage, []string{"--nccl-lib", "not a shared library", "libnccl.so.2"}},
		{"a library that does not exist", []string{"allreduce", "--nccl-lib", p("nope.so")}, nil, engine.ExitUsage, []string{"--nccl-lib", "no such file"}},
		{"a bare library name is the loader's to find", []string{"allreduce", "--nccl-lib", "libnccl.so.2"}, nil, engine.ExitUsage, []string{"--nccl-lib libnccl.so.2 names NCCL, but the nccl backend is not available"}},
		{"a library with the cpu backend", []string{"allreduce", "--backend", "cpu", "--nccl-lib", "/bin/sh"}, nil, engine.ExitUsage, []string{"--nccl-lib has no use with --backend cpu"}},
		{"negative bootstrap timeout", []string{"allreduce", "--bootstrap-timeout", "-1s"}, nil, engine.ExitUsage, []string{"--bootstrap-timeout -1s", "positive"}},
		{"port out of range", []string{"launch", "--port", "70000", "-n", "2", "--", "allreduce"}, nil, engine.ExitUsage, []string{"--port 70000", "65535"}},
		{"launch of an unknown command", []string{"launch", "-n", "2", "--", "allreduse"}, nil, engine.ExitUsage, []string{`"allreduse" is not a collbench command`}},
		{"launch with a bad flag", []string{"launch", "-n", "2", "--", "allreduce", "--sizez", "8"}, nil, engine.ExitUsage, []string{"unknown flag: --sizez", "collbench allreduce --help"}},
		{"MASTER_PORT not a number", []string{"allreduce", "--sizes", "8"}, append(torchrun, "MASTER_PORT=abc"), engine.ExitUsage, []string{"MASTER_PORT=abc is not a port number", "1-65535", "torchrun"}},
		{"too many cpu ranks", []string{"allreduce", "-g", "100000"}, nil, engine.ExitUsage, []string{"--ranks 100000", "at most 1024 ranks", "collbench launch"}},
		{"negative compare threshold", []string{"compare", "--time-threshold", "-5", p("a.json"), p("b.json")}, nil, engine.ExitUsage, []string{"invalid --time-threshold -5"}},
		{"zero busbw threshold", []string{"compare", "--busbw-threshold", "0", p("a.json"), p("b.json")}, nil, engine.ExitUsage, []string{"invalid --busbw-threshold 0"}},
		{"record into a missing directory", []string{"topo", "--record", p("no/dir/f.json")}, nil, engine.ExitUsage, []string{"--record", "does not exist"}},
		{"report over its input", []string{"report", p("a.json"), "-o", p("a.json")}, nil, engine.ExitUsage, []string{"is also an input"}},
		{"compare over its input", []string{"compare", p("a.json"), p("b.json"), "-o", p("b.json")}, nil, engine.ExitUsage, []string{"is also an input"}},
		{"baseline over its input", []string{"baseline", "make", p("a.json"), "-o", p("a.json")}, nil, engine.ExitUsage, []string{"is also an input"}},
		{"negative warmup in a suite", []string{"run", "--config", p("negative.yaml")}, nil, engine.ExitUsage, []string{"line 4", "warmup: -1 must be 0 or more"}},
		{"negative iterations in a suite", []string{"run", "--config", p("negative-line.yaml")}, nil, engine.ExitUsage, []string{"line 3", "iterations: -3"}},
		{"zero iterations in a suite", []string{"run", "--config", p("zero-iters.yaml")}, nil, engine.ExitUsage, []string{"line 2", "iterations: 0 must be 1 or more"}},
		{"a suite's baseline is missing", []string{"run", "--config", p("missing-base.yaml"), "--output", p("out-m")}, nil, engine.ExitUsage, []string{"base.json", "not found", "baseline make", "--no-baseline"}},
		{"unknown command", []string{"allreduse"}, nil, engine.ExitUsage, []string{`unknown command "allreduse"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, out, errOut := testFactory()
			if c.env != nil {
				env := append([]string{}, c.env...)
				f.Environ = func() []string { return env }
			}
			code := run(t, f, c.args...)
			msg := errOut.String()
			if code != c.code || out.Len() != 0 || strings.Count(msg, "\n") != 1 {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q", code, c.code, out, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q lacks %q", msg, w)
				}
			}
			for _, bad := range []string{"panic:", "goroutine 1 [", "context canceled", "launch launch"} {
				if strings.Contains(msg, bad) {
					t.Errorf("stderr %q has %q", msg, bad)
				}
			}
		})
	}
}

// TestNewcomerOutputs: what a newcomer reads is right.
func TestNewcomerOutputs(t *testing.T) {
	dir := t.TempDir()
	newcomerFiles(t, dir)
	p := func(name string) string { return filepath.Join(dir, name) }

	t.Run("a type listed twice runs once", func(t *testing.T) {
		f, out, errOut := testFactory()
		if code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "1K", "--dtype", "float,fp32,float", "-n", "1", "-w", "0", "--format", "json"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		d, err := results.Read(out)
		if err != nil || len(d.Results) != 1 {
			t.Fatalf("%v: %d rows, want 1", err, len(d.Results))
		}
	})
	t.Run("rows of count 0 are noted", func(t *testing.T) {
		f, out, errOut := testFactory()
		if code := run(t, f, "allgather", "--backend", "cpu", "--sizes", "8,1K", "-n", "1", "-w", "0"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out.String(), "1 of 2 rows move no data") {
			t.Errorf("no note on the empty row:\n%s", out)
		}
	})
	t.Run("suite: warmup 0 and check 0 are kept, the notice once, the command re-runnable", func(t *testing.T) {
		f, out, errOut := testFactory()
		outDir := p("out-w")
		if code := run(t, f, "run", "--config", p("zero-warmup.yaml"), "--output", outDir); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if n := strings.Count(errOut.String(), "collbench: backend"); n > 1 {
			t.Errorf("backend notice printed %d times:\n%s", n, errOut)
		}
		if !strings.Contains(out.String(), "warmup 0") || strings.Contains(out.String(), "warmup 5") {
			t.Errorf("header does not say warmup 0:\n%s", out)
		}
		b, err := os.ReadFile(filepath.Join(outDir, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		var d results.Document
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		if d.Config.Warmup != 0 || d.Config.Check != 0 {
			t.Errorf("config warmup %d check %d, want 0 and 0", d.Config.Warmup, d.Config.Check)
		}
		cmd := strings.Join(d.Command, " ")
		if strings.HasSuffix(cmd, "--rank-list") || !strings.Contains(cmd, "--sizes") || !strings.Contains(cmd, "-w 0") {
			t.Errorf("recorded command cannot be re-run: %q", cmd)
		}
		// Re-run it: the recorded command is a valid command line.
		f2, _, errOut2 := testFactory()
		if code := run(t, f2, append(d.Command[1:], "-q")...); code != 0 {
			t.Errorf("re-running %q: exit %d: %s", cmd, code, errOut2)
		}
	})
	t.Run("backend notice is short and says it once", func(t *testing.T) {
		f, _, errOut := testFactory()
		if code := run(t, f, "allreduce", "--sizes", "1K", "-n", "1", "-w", "0"); code != 0 {
			t.Fatalf("exit %d", code)
		}
		line := strings.SplitN(errOut.String(), "\n", 2)[0]
		if len(line) > 140 || strings.Count(line, "NCCL unavailable") > 1 || !strings.HasPrefix(line, "collbench: backend cpu") {
			t.Errorf("notice %q (%d characters)", line, len(line))
		}
	})
	t.Run("all-singleton groups show n/a, not 0", func(t *testing.T) {
		f, out, errOut := testFactory()
		if code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "1K", "-n", "1", "-w", "0", "--rank-list", "singletons"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		s := out.String()
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "sum |") && strings.Contains(l, "0.00") {
				t.Errorf("sum row shows a bandwidth: %q", l)
			}
		}
		if !strings.Contains(s, "# avg bus bandwidth: n/a") {
			t.Errorf("average bandwidth is not n/a:\n%s", s)
		}
	})
	t.Run("verify-groups says which layouts are the same", func(t *testing.T) {
		f, out, errOut := testFactory()
		if code := run(t, f, "verify-groups", "--backend", "cpu", "-g", "4", "--sizes", "1K"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out.String(), "pairs = halves") {
			t.Errorf("halves dropped silently:\n%s", out)
		}
	})
	t.Run("two cpu runs compared get the noise note", func(t *testing.T) {
		f, out, _ := testFactory()
		run(t, f, "compare", "--time-threshold", "0.001", "--time-floor", "0", p("a.json"), p("b.json"))
		if !strings.Contains(out.String(), "cpu backend, whose times move") {
			t.Errorf("no note on cpu noise:\n%s", out)
		}
	})
	t.Run("version, completion and man pages", func(t *testing.T) {
		f, out, _ := testFactory()
		if code := run(t, f, "--version"); code != 0 || !strings.HasPrefix(out.String(), "collbench "+Version+" (") {
			t.Errorf("--version: exit %d %q", code, out)
		}
		f, out2, _ := testFactory()
		run(t, f, "version")
		if out.String() != out2.String() {
			t.Errorf("--version %q and version %q differ", out, out2)
		}
		for _, sh := range []string{"bash", "zsh", "fish"} {
			f, out, errOut := testFactory()
			if code := run(t, f, "completion", sh); code != 0 || !strings.Contains(out.String(), "collbench") {
				t.Errorf("completion %s: exit %d: %s", sh, code, errOut)
			}
		}
		f, _, errOut := testFactory()
		mdir := p("man")
		if code := run(t, f, "man", "--dir", mdir); code != 0 {
			t.Fatalf("man: exit %d: %s", code, errOut)
		}
		for _, page := range []string{"collbench.1", "collbench-allreduce.1", "collbench-doctor.1"} {
			b, err := os.ReadFile(filepath.Join(mdir, page))
			if err != nil || !strings.Contains(string(b), ".TH") {
				t.Errorf("%s: %v", page, err)
			}
		}
	})
}
