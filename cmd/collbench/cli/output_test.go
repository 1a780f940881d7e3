package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"collbench/engine"
)

// TestEveryOutputFlagWritesOnlyAsAsked: each command that writes a file is
// pointed at every kind of path. A symlink stays a link and its target gets
// the document; a named pipe and a device are written through, never
// replaced; "-" puts the document on standard output; a directory or a
// missing directory is refused before anything runs, with one line that
// names the flag and the path given, exit 2.
func TestEveryOutputFlagWritesOnlyAsAsked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	newcomerFiles(t, dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	commands := []struct {
		name string
		args []string // the output path is appended after the last flag
		flag string
		want string // what the document starts with
	}{
		{"allreduce", []string{"allreduce", "--backend", "cpu", "--sizes", "1K", "-n", "1", "-w", "0", "-q"}, "-o", "{"},
		{"doctor", []string{"doctor", "--backend", "cpu", "--quick", "-g", "2", "-q"}, "-o", "{"},
		{"doctor prom", []string{"doctor", "--backend", "cpu", "--quick", "-g", "2", "-q"}, "--prom", "# HELP"},
		{"compare", []string{"compare", p("a.json"), p("b.json"), "--format", "json"}, "-o", "{"},
		{"baseline", []string{"baseline", "make", p("a.json"), p("b.json")}, "-o", "{"},
		{"report", []string{"report", p("a.json")}, "-o", "<!DOCTYPE html>"},
		{"plot", []string{"plot", p("a.json")}, "-o", "<?xml"},
	}
	for _, c := range commands {
		ext := ".json"
		switch c.name {
		case "report":
			ext = ".html"
		case "plot":
			ext = ".svg"
		case "doctor prom":
			ext = ".prom"
		}
		runTo := func(t *testing.T, path string) (int, string, string) {
			f, out, errOut := testFactory()
			code := run(t, f, append(append([]string{}, c.args...), c.flag, path)...)
			return code, out.String(), errOut.String()
		}
		// A comparison of two cpu runs may exit 1 or 5: what matters is where the file went.
		ok := func(code int) bool {
			return code == 0 || code == engine.ExitCheckFailed || code == engine.ExitInconclusive
		}

		t.Run(c.name+"/symlink", func(t *testing.T) {
			sub := t.TempDir()
			target := filepath.Join(sub, "target"+ext)
			if err := os.WriteFile(target, []byte("old"), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
				t.Fatal(err)
			}
			link := filepath.Join(sub, "link"+ext)
			if err := os.Symlink("target"+ext, link); err != nil {
				t.Fatal(err)
			}
			if code, _, errOut := runTo(t, link); !ok(code) {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatal("the symlink was replaced")
			}
			if b, _ := os.ReadFile(target); !strings.HasPrefix(strings.TrimSpace(string(b)), c.want) {
				t.Fatalf("the link's target holds %.60q", b)
			}
		})
		t.Run(c.name+"/dangling symlink", func(t *testing.T) {
			sub := t.TempDir()
			link := filepath.Join(sub, "link"+ext)
			if err := os.Symlink("made"+ext, link); err != nil {
				t.Fatal(err)
			}
			if code, _, errOut := runTo(t, link); !ok(code) {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if b, _ := os.ReadFile(filepath.Join(sub, "made"+ext)); !strings.HasPrefix(strings.TrimSpace(string(b)), c.want) {
				t.Fatalf("the link's target holds %.60q", b)
			}
		})
		t.Run(c.name+"/named pipe", func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "fifo")
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skip(err)
			}
			got := make(chan string, 1)
			go func() {
				fh, err := os.Open(fifo)
				if err != nil {
					got <- err.Error()
					return
				}
				b, _ := io.ReadAll(fh)
				fh.Close()
				got <- string(b)
			}()
			if code, _, errOut := runTo(t, fifo); !ok(code) {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			select {
			case s := <-got:
				if !strings.HasPrefix(strings.TrimSpace(s), c.want) {
					t.Fatalf("the reader got %.60q", s)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the reader got nothing")
			}
			if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
				t.Fatal("the named pipe was replaced")
			}
		})
		t.Run(c.name+"/device", func(t *testing.T) {
			if _, err := os.Stat("/dev/null"); err != nil {
				t.Skip("no /dev/null")
			}
			if code, _, errOut := runTo(t, "/dev/null"); !ok(code) {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if fi, _ := os.Lstat("/dev/null"); fi.Mode()&os.ModeCharDevice == 0 {
				t.Fatal("/dev/null was replaced")
			}
		})
		t.Run(c.name+"/stdout", func(t *testing.T) {
			code, out, errOut := runTo(t, "-")
			if !ok(code) {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("stdout lacks the document: %.200q", out)
			}
			if _, err := os.Stat("-"); err == nil {
				t.Fatal("a file named - was created")
			}
		})
		for _, bad := range []struct{ kind, path, want string }{
			{"directory", dir, "is a directory"},
			{"missing directory", p("no/such/dir/x" + ext), "does not exist"},
		} {
			t.Run(c.name+"/"+bad.kind, func(t *testing.T) {
				code, out, errOut := runTo(t, bad.path)
				if code != engine.ExitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
					t.Fatalf("exit %d, stdout %.80q, stderr %q", code, out, errOut)
				}
				for _, w := range []string{c.flag, bad.path, bad.want} {
					if c.flag == "-o" {
						w = strings.Replace(w, "-o", "--output", 1)
					}
					if !strings.Contains(errOut, w) {
						t.Errorf("stderr %q lacks %q", errOut, w)
					}
				}
				if strings.Contains(errOut, "collbench-probe") || strings.Contains(errOut, ".tmp-") {
					t.Errorf("stderr names an internal file: %q", errOut)
				}
			})
		}
	}
}
