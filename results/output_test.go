package results

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func outDoc(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func writeOut(t *testing.T, path, s string) error {
	t.Helper()
	tg, err := ResolveOutput(path)
	if err != nil {
		return err
	}
	return tg.Write(true, outDoc(s))
}

func readOut(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEveryKindOfPath(t *testing.T) {
	dir := t.TempDir()

	// A new path and a regular file: written whole, replaced atomically.
	p := filepath.Join(dir, "r.json")
	if err := writeOut(t, p, "one"); err != nil {
		t.Fatal(err)
	}
	ino := outInode(t, p)
	if err := writeOut(t, p, "two"); err != nil || readOut(t, p) != "two" {
		t.Fatalf("regular file: %v %q", err, readOut(t, p))
	}
	if outInode(t, p) == ino {
		t.Fatal("a regular file was rewritten in place rather than replaced")
	}

	// A symlink: its target is replaced, the link stays a link.
	target := filepath.Join(dir, "target.json")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("target.json", link); err != nil {
		t.Fatal(err)
	}
	if err := writeOut(t, link, "new"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced by a file")
	}
	if readOut(t, target) != "new" {
		t.Fatalf("the symlink's target holds %q", readOut(t, target))
	}

	// A dangling symlink (through a chain of two): its target is created.
	if err := os.Symlink(filepath.Join(dir, "later.json"), filepath.Join(dir, "l1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("l1", filepath.Join(dir, "l2")); err != nil {
		t.Fatal(err)
	}
	if err := writeOut(t, filepath.Join(dir, "l2"), "made"); err != nil {
		t.Fatal(err)
	}
	if readOut(t, filepath.Join(dir, "later.json")) != "made" {
		t.Fatal("a dangling symlink's target was not created")
	}
	for _, l := range []string{"l1", "l2"} {
		if fi, _ := os.Lstat(filepath.Join(dir, l)); fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a symlink", l)
		}
	}

	// No temporary file is left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

func outInode(t *testing.T, p string) uint64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestANamedPipeIsWrittenThroughNotReplaced(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no named pipes here:", err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := writeOut(t, fifo, "through the pipe"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "through the pipe" {
			t.Fatalf("the reader got %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader got nothing")
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatal("the named pipe was replaced")
	}

	// No reader at all: a bounded wait, then an error naming the pipe.
	old := PipeReaderWait
	PipeReaderWait = 100 * time.Millisecond
	defer func() { PipeReaderWait = old }()
	err := writeOut(t, fifo, "nobody")
	if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "for reading") {
		t.Fatalf("a pipe without a reader: %v", err)
	}
}

func TestDevicesAndSockets(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	if err := writeOut(t, "/dev/null", "gone"); err != nil {
		t.Fatalf("/dev/null: %v", err)
	}
	if fi, _ := os.Lstat("/dev/null"); fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatal("/dev/null was replaced")
	}
	if _, err := os.Stat("/dev/full"); err == nil {
		err := writeOut(t, "/dev/full", "x")
		if err == nil || err.Error() != "writing /dev/full: no space left on the device" {
			t.Fatalf("/dev/full: %v", err)
		}
		if fi, _ := os.Lstat("/dev/full"); fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatal("/dev/full was replaced")
		}
	}

	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skip("no unix sockets here:", err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- string(b)
	}()
	if err := writeOut(t, sock, "over the socket"); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "over the socket" {
		t.Fatalf("the socket got %q", s)
	}
}

func TestStandardOutputNamesAreStreams(t *testing.T) {
	for _, p := range []string{"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", fmt.Sprintf("/proc/%d/fd/1", os.Getpid())} {
		tg, err := ResolveOutput(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !tg.IsStdout() {
			t.Fatalf("%s is not standard output: %+v", p, tg)
		}
	}
	if tg, err := ResolveOutput("/dev/stderr"); err != nil || tg.OutputKind != StreamOutput || tg.IsStdout() {
		t.Fatalf("/dev/stderr: %+v %v", tg, err)
	}
	// A descriptor written through a duplicate stays open afterwards.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p := fmt.Sprintf("/dev/fd/%d", w.Fd())
	if err := writeOut(t, p, "a"); err != nil {
		t.Fatal(err)
	}
	if err := writeOut(t, p, "b"); err != nil {
		t.Fatalf("the descriptor was closed by the first write: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "ab" {
		t.Fatalf("read %q %v", buf, err)
	}
	if _, err := ResolveOutput("/dev/fd/987"); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Fatalf("a closed descriptor: %v", err)
	}
}

func TestRefusalsNameThePathGiven(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		path, want string
	}{
		{dir, "is a directory"},
		{filepath.Join(dir, "missing", "x.json"), "does not exist (create it first)"},
		{"", "empty output path"},
	}
	if err := os.Symlink(dir, filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ path, want string }{filepath.Join(dir, "dirlink"), "is a directory"})
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		cases = append(cases, struct{ path, want string }{filepath.Join(ro, "x.json"), "no permission to create files in"})
	}
	if _, err := os.Stat("/dev/loop0"); err == nil {
		cases = append(cases, struct{ path, want string }{"/dev/loop0", "is a block device"})
	}
	for _, c := range cases {
		_, err := ResolveOutput(c.path)
		if err == nil {
			t.Errorf("%q was accepted", c.path)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || (c.path != "" && !strings.HasPrefix(msg, c.path)) || strings.Contains(msg, "collbench-probe") || strings.Contains(msg, "\n") {
			t.Errorf("%q: %q, want the path and %q on one line", c.path, msg, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "dirlink" && e.Name() != "ro" {
			t.Errorf("a refusal created %s", e.Name())
		}
	}
}

// TestAFileThisUserMayNotWriteIsRefused: where the kernel says this user
// may not write an existing file (a non-root user and mode 0444, another
// user's 0600), the path is refused before anything runs, as the shell's
// > refuses it, and the file is left as it was.
func TestAFileThisUserMayNotWriteIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(p, []byte("mine"), 0o400); err != nil { //nolint:gosec // G306: read-only on purpose
		t.Fatal(err)
	}
	saved := canWrite
	t.Cleanup(func() { canWrite = saved })
	canWrite = func(string) error { return unix.EACCES }
	_, err := ResolveOutput(p)
	if err == nil || !strings.Contains(err.Error(), p+": permission denied") || !strings.Contains(err.Error(), "-r--------") {
		t.Fatalf("got %v, want a refusal naming the path and its mode", err)
	}
	canWrite = saved
	// Root may write it, as the shell's > would: the mode stays 0444.
	if os.Geteuid() == 0 {
		tg, err := ResolveOutput(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.Write(false, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o400 {
			t.Errorf("mode %o after the write, want 0400", fi.Mode().Perm())
		}
	}
}
