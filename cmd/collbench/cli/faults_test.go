package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"collbench/results"
)

// The tests in this file plant the faults collbench must survive in real
// processes of this test binary (acting as collbench) and watch each being
// handled: a stopped rank, a collective that never returns, a killed rank,
// a killed rank 0, a killed launcher, a run killed while writing results,
// and signals at a large size.

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is collbench (this test binary) running as a child process.
type proc struct {
	cmd     *exec.Cmd
	out     *lockedBuffer
	errb    *lockedBuffer
	done    chan struct{}
	code    int
	started time.Time
	ended   time.Time
	// tmp is the process's TMPDIR, the test's own: what a killed process
	// leaves there is removed with the test.
	tmp string
}

// startSelf starts `collbench ARGS` with extra environment, in a fresh
// environment marker so stray processes of this test can be found, and
// with a temporary directory of the test's own.
func startSelf(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], args...) //nolint:gosec // the test starts its own binary or a shell helper it wrote
	cmd.Env = append(os.Environ(), "CB_CLI_CHILD=1", "CB_FAULT_TEST="+t.Name(), "TMPDIR="+tmp)
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan struct{}), tmp: tmp}
	cmd.Stdout, cmd.Stderr = p.out, p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.started = time.Now()
	go func() {
		err := cmd.Wait()
		p.ended = time.Now()
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		killStrays(t.Name())
	})
	return p
}

// wait returns the exit code, failing the test after timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		t.Fatalf("still running after %v\nstdout:\n%s\nstderr:\n%s", timeout, p.out, p.errb)
	}
	return -1
}

// procsOf lists live processes whose environment carries the marker of
// this test, with their COLLBENCH_RANK (-1 when none).
func procsOf(testName string) map[int]int {
	out := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("\x00CB_FAULT_TEST="+testName+"\x00")) && !bytes.HasPrefix(env, []byte("CB_FAULT_TEST="+testName+"\x00")) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue // a zombie is dead, only not yet reaped
			}
		}
		rank := -1
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("COLLBENCH_RANK=")); ok {
				rank, _ = strconv.Atoi(string(v))
			}
		}
		out[pid] = rank
	}
	return out
}

func killStrays(testName string) {
	for pid := range procsOf(testName) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// rankPID waits for the process of a rank of this test to exist.
func rankPID(t *testing.T, rank int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for pid, r := range procsOf(t.Name()) {
			if r == rank {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("rank %d never started", rank)
	return 0
}

// noneLeft checks that no process of this test is left within a few seconds.
func noneLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := procsOf(t.Name())
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %v (pid: rank)", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readRows reads a results file; it must always be a valid document.
func readRows(t *testing.T, path string) *results.Document {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	d, err := results.Read(fh)
	if err != nil {
		t.Fatalf("%s is not a valid result document: %v", path, err)
	}
	return d
}

// waitRows waits until path holds at least n rows.
func waitRows(t *testing.T, p *proc, path string, n int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			if d := readRows(t, path); len(d.Results) >= n {
				return len(d.Results)
			}
		}
		select {
		case <-p.done:
			t.Fatalf("ended before %d rows (exit %d): %s", n, p.code, p.errb)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no %d rows in %s after 60 s", n, path)
	return 0
}

// A slow sweep across 4 processes: rows keep coming for a long time.
func slowSweep(out string, extra ...string) []string {
	args := []string{"launch", "-n", "4", "--", "allreduce", "--backend", "cpu", "--sizes", "64K:4M:+64K", "-n", "100", "-w", "1", "-o", out}
	return append(args, extra...)
}
