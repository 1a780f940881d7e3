package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	tunerHarnessOnce sync.Once
	tunerHarness     string
	tunerHarnessErr  error
)

// askTuner loads the library as NCCL loads a tuner, on a communicator of
// ranks ranks and nodes nodes, asks it each query ("FUNC BYTES PIPEOPS
// REGBUFF", testdata/tuner_harness.c) and returns its answers, one line
// each ("ring simple 16"), and what it wrote on stderr.
func askTuner(t *testing.T, env []string, ranks, nodes string, queries ...string) ([]string, string) {
	return askTunerAs(t, "4", env, ranks, nodes, queries...)
}

// askTunerAs is askTuner by the tuner interface version given: "6" asks
// the chunk size too, and each answer ends with it ("ring simple 16
// 524288").
func askTunerAs(t *testing.T, version string, env []string, ranks, nodes string, queries ...string) ([]string, string) {
	t.Helper()
	lib, _ := built(t)
	tunerHarnessOnce.Do(func() {
		tunerHarness = filepath.Join(filepath.Dir(lib), "tuner_harness")
		if out, err := exec.Command("cc", "-O2", "-Wall", "-I../../backend/nccl/tuner", "-o", tunerHarness, "testdata/tuner_harness.c", "-ldl").CombinedOutput(); err != nil {
			tunerHarnessErr = err
			t.Logf("%s", out)
		}
	})
	if tunerHarnessErr != nil {
		t.Fatalf("building the tuner harness: %v", tunerHarnessErr)
	}
	cmd := exec.Command(tunerHarness, lib, ranks, nodes, version) //nolint:gosec // G204: the test's own harness and library
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(strings.Join(queries, "\n") + "\n")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("tuner harness: %v\n%s", err, errOut.String())
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n"), errOut.String()
}

// TestTunerAppliesTheFile: the library's tuner applies a tuner file in an
// application as NCCL's example plugin picks its lines (the first that
// covers the operation, its dimensions the communicator's or -1), where
// NCCL's cost table lets the pair run, with the line's channels or NCCL's
// own (16 here) where it names none; NCCL's own choice (ring/simple)
// elsewhere.
func TestTunerAppliesTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tuner.csv")
	lines := "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\n" +
		"allreduce,0,65536,tree,ll,-1,-1,-1,-1,-1\n" +
		"allreduce,65537,1048576,ring,ll128,8,-1,4,-1,-1\n" +
		"allreduce,1048577,1073741824,nvls,simple,-1,-1,-1,-1,-1\n" +
		"allgather,0,4096,ring,ll,2,-1,8,-1,-1\n" +
		"broadcast,0,100,tree,simple,-1,-1,-1,2,-1\n" +
		"reducescatter,0,1048576,pat,simple,4,1,-1,-1,1\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ query, want, why string }{
		{"4 1024 1 0", "tree ll 16", "the first line, no channels named: NCCL's own count"},
		{"4 100000 1 0", "ring ll128 8", "a line for 4 ranks, with its channels"},
		{"4 2000000 1 0", "ring simple 16", "a line NCCL's table cannot run (NVLS): NCCL's own"},
		{"2 1024 1 0", "ring simple 16", "a line for 8 ranks on a communicator of 4: NCCL's own"},
		{"0 50 1 0", "ring simple 16", "a line for 2 operations in the group, asked about 1"},
		{"0 50 2 0", "tree simple 16", "the same with 2"},
		{"3 4096 1 1", "pat simple 4", "registered buffers on one node"},
		{"3 4096 1 0", "ring simple 16", "unregistered buffers: no line"},
		{"1 8 1 0", "ring simple 16", "reduce: no line"},
	}
	var queries []string
	for _, c := range cases {
		queries = append(queries, c.query)
	}
	got, stderr := askTuner(t, []string{envTunerFile + "=" + file}, "4", "1", queries...)
	if len(got) != len(cases) || stderr != "" {
		t.Fatalf("%d answers to %d questions, stderr %q", len(got), len(cases), stderr)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%s (%s): %q, want %q", c.query, c.why, got[i], c.want)
		}
	}
}

// TestTunerAppliesTheFilesChunk: under the tuner interface 6 (NCCL 2.30)
// the library's tuner gives NCCL a line's chunk size where the line's
// pair runs, and leaves NCCL's own (524288 bytes here) where the line
// names none, where the table made NCCL run another pair, and where no
// line covers the operation; the same file under interface 4 still sets
// the pairs.
func TestTunerAppliesTheFilesChunk(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tuner.csv")
	lines := "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff,chunkBytes\n" +
		"allgather,0,4194304,ring,simple,8,-1,4,-1,-1,1048576\n" +
		"allgather,4194305,16777216,ring,ll128,-1,-1,4,-1,-1\n" +
		"allreduce,0,1048576,nvls,simple,-1,-1,-1,-1,-1,65536\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ query, want, why string }{
		{"2 4194304 1 0", "ring simple 8 1048576", "the line's pair, channels and chunk"},
		{"2 8388608 1 0", "ring ll128 16 524288", "a line with no chunk: NCCL's"},
		{"4 4096 1 0", "ring simple 16 524288", "a line NCCL's table cannot run (NVLS): NCCL's pair and chunk"},
		{"4 4194304 1 0", "ring simple 16 524288", "no line"},
	}
	var queries []string
	for _, c := range cases {
		queries = append(queries, c.query)
	}
	got, stderr := askTunerAs(t, "6", []string{envTunerFile + "=" + file}, "4", "1", queries...)
	if len(got) != len(cases) || stderr != "" {
		t.Fatalf("%d answers to %d questions, stderr %q", len(got), len(cases), stderr)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("interface 6, %s (%s): %q, want %q", c.query, c.why, got[i], c.want)
		}
	}
	if got, _ := askTuner(t, []string{envTunerFile + "=" + file}, "4", "1", cases[0].query); len(got) != 1 || got[0] != "ring simple 8" {
		t.Errorf("interface 4: %q, want the pair and channels", got)
	}
}

// TestTunerWithoutAFileChangesNothing: no file named, a file missing and a
// file that is no tuner file each leave every choice to NCCL; the last
// two say so in one line on stderr, naming the variable and the problem.
func TestTunerWithoutAFileChangesNothing(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("allreduce,0,65536,tree,ll,-1,-1,-1,-1,-1\nallreduce,lots,1,ring,ll\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env, says string
	}{
		{"", ""},
		{envTunerFile + "=/nonexistent/tuner.csv", "collbench tuner: " + envTunerFile + "=/nonexistent/tuner.csv: "},
		{envTunerFile + "=" + bad, "collbench tuner: " + envTunerFile + "=" + bad + ": line 2: "},
	} {
		var env []string
		if c.env != "" {
			env = []string{c.env}
		}
		got, stderr := askTuner(t, env, "4", "1", "4 1024 1 0")
		if len(got) != 1 || got[0] != "ring simple 16" {
			t.Errorf("%q: %v, want NCCL's own choice", c.env, got)
		}
		if (c.says == "") != (stderr == "") || !strings.Contains(stderr, c.says) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 ||
			(c.says != "" && !strings.Contains(stderr, "NCCL runs its own choices")) {
			t.Errorf("%q: stderr %q, want one line with %q", c.env, stderr, c.says)
		}
	}
}

// TestReadTunerFile: the lines the tuner gets, by NCCL's indices, in the
// file's order; none without a file; a bad file named with its line.
func TestReadTunerFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tuner.csv")
	if err := os.WriteFile(file, []byte("allreduce,0,65536,tree,ll,-1,-1,-1,-1,-1\nallgather,1,2,ring,simple,4,2,16,1,0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == envTunerFile {
				return v
			}
			return ""
		}
	}
	ls, err := readTunerFile(env(file))
	if err != nil || len(ls) != 2 || ls[0].Func != 4 || ls[0].Algo != 0 || ls[0].Proto != 0 || ls[0].Channels != -1 ||
		ls[1].Func != 2 || ls[1].Algo != 1 || ls[1].Proto != 2 || ls[1].Channels != 4 || ls[1].NNodes != 2 || ls[1].NRanks != 16 ||
		ls[1].NumPipeOps != 1 || ls[1].RegBuff != 0 {
		t.Errorf("lines %+v, error %v", ls, err)
	}
	if ls, err := readTunerFile(env("")); ls != nil || err != nil {
		t.Errorf("no file: %+v, %v", ls, err)
	}
	if _, err := readTunerFile(env(file + ".missing")); err == nil || !strings.Contains(err.Error(), envTunerFile+"="+file+".missing") {
		t.Errorf("a missing file: %v", err)
	}
	// The hook NCCL's first question runs: without a file it gives the
	// tuner nothing, and a second call reads nothing again.
	t.Setenv(envTunerFile, "")
	cbwTunerLoad()
	cbwTunerLoad()
}
