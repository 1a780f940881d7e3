package results

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLatestNeverStallsItsCaller: documents offered to a named pipe that
// a process holds open and never reads (so the pipe fills and the write
// blocks) and to one nobody opens: every Offer returns at once, and Close
// gives up after its bound with a line naming the path.
func TestLatestNeverStallsItsCaller(t *testing.T) {
	old := PipeReaderWait
	PipeReaderWait = time.Second
	t.Cleanup(func() { PipeReaderWait = old })
	dir := t.TempDir()
	big := bytes.Repeat([]byte("x"), 1<<20) // more than a pipe holds
	for _, held := range []bool{true, false} {
		p := filepath.Join(dir, fmt.Sprintf("fifo-%v", held))
		err := unix.Mkfifo(p, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		reader := -1
		if held { // a reader that opens and never reads
			if reader, err = unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK, 0); err != nil {
				t.Fatal(err)
			}
		}
		tg, err := ResolveOutput(p)
		if err != nil {
			t.Fatal(err)
		}
		l := NewLatestOutput(tg, false)
		start := time.Now()
		for i := 0; i < 200; i++ {
			l.Offer(big)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("held=%v: 200 offers took %v; an offer must not wait on the writer", held, d)
		}
		if l.Replaced() < 198 {
			t.Errorf("held=%v: %d documents replaced, want at least 198", held, l.Replaced())
		}
		err = l.Close(200 * time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not written") {
			t.Errorf("held=%v: Close: %v", held, err)
		}
		// The reader goes away (or never came): the writer ends too.
		if reader >= 0 {
			unix.Close(reader)
		}
		if err := l.Close(10 * time.Second); err == nil || strings.Contains(err.Error(), "not written after") {
			t.Errorf("held=%v: once the reader is gone, Close: %v", held, err)
		}
	}
}

// TestLatestLeavesTheLastDocument: a regular file holds the last document
// offered, whole, once Close returns.
func TestLatestLeavesTheLastDocument(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rec.json")
	tg, err := ResolveOutput(p)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLatestOutput(tg, true)
	for i := 0; i < 50; i++ {
		l.Offer([]byte(fmt.Sprintf("doc %d\n", i)))
	}
	if err := l.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "doc 49\n" {
		t.Errorf("the file holds %q, want the last document", b)
	}
	// A write error is returned by Close, naming the path.
	gone := filepath.Join(t.TempDir(), "sub", "rec.json")
	if err := os.MkdirAll(filepath.Dir(gone), 0o750); err != nil {
		t.Fatal(err)
	}
	tg, err = ResolveOutput(gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Dir(gone)); err != nil {
		t.Fatal(err)
	}
	l = NewLatestOutput(tg, false)
	l.Offer([]byte("x"))
	if err := l.Close(10 * time.Second); err == nil || !strings.Contains(err.Error(), gone) {
		t.Errorf("a write into a removed directory: %v", err)
	}
}
