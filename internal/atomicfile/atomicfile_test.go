package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

func TestReplaceKeepsTheOldFileOnFailure(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	if err := Replace(p, true, func(w io.Writer) error { _, err := fmt.Fprint(w, "one"); return err }); err != nil {
		t.Fatal(err)
	}
	err := Replace(p, false, func(w io.Writer) error { fmt.Fprint(w, "half"); return errors.New("boom") })
	if err == nil {
		t.Fatal("a failed write reported success")
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("the old file was damaged: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

// TestReplaceKeepsWhatTheShellWouldKeep: a replaced file keeps its mode
// (0444, 0600, 0640), its owner and group (another user's, where this
// process may give them: root), and its other names (a hard link is
// written in place); a new file gets 0666 less the umask, as from >.
func TestReplaceKeepsWhatTheShellWouldKeep(t *testing.T) {
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := fmt.Fprint(w, s); return err }
	}
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o444, 0o600, 0o640} {
		p := filepath.Join(dir, fmt.Sprintf("m%o", mode))
		if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		owner := os.Geteuid()
		if owner == 0 {
			owner = 4242 // another user's file, as root sees many
			if err := os.Chown(p, owner, 4343); err != nil {
				t.Fatal(err)
			}
		}
		if err := Replace(p, false, write("new")); err != nil {
			t.Fatalf("mode %o: %v", mode, err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if b, _ := os.ReadFile(p); string(b) != "new" || fi.Mode().Perm() != mode || int(st.Uid) != owner {
			t.Errorf("mode %o: now %q, mode %o, owner %d (want %d)", mode, b, fi.Mode().Perm(), st.Uid, owner)
		}
		if os.Geteuid() == 0 && st.Gid != 4343 {
			t.Errorf("mode %o: group %d, want 4343", mode, st.Gid)
		}
	}
	// A file with a second name: both names see the new content.
	p, other := filepath.Join(dir, "linked"), filepath.Join(dir, "other-name")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, other); err != nil {
		t.Fatal(err)
	}
	if err := Replace(p, true, write("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(other); string(b) != "new" {
		t.Errorf("the other name reads %q: the link was cut", b)
	}
	// A new file: 0666 less the umask.
	mask := os.FileMode(syscall.Umask(0o022)) //nolint:gosec // G115: a umask, 9 bits
	syscall.Umask(int(mask))
	p = filepath.Join(dir, "fresh")
	if err := Replace(p, false, write("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o666&^mask {
		t.Errorf("a new file has mode %o, want %o", fi.Mode().Perm(), 0o666&^mask)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 6 {
		t.Errorf("files left beside: %v", entries)
	}
}

// TestConcurrentReplacesStayWhole: writers of one path in one process at
// once (a row's rewrite and the last write on a second signal) each put a
// whole version in place; with one temporary name per process, one renamed
// another's half-written file over the path.
func TestConcurrentReplacesStayWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	const size = 64 << 10
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				err := Replace(path, false, func(w io.Writer) error {
					chunk := bytes.Repeat([]byte{byte('a' + g)}, 4<<10)
					for k := 0; k < size/len(chunk); k++ {
						if _, err := w.Write(chunk); err != nil {
							return err
						}
						runtime.Gosched()
					}
					_, err := io.WriteString(w, "END")
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				b, err := os.ReadFile(path)
				if err != nil || len(b) != size+3 || !bytes.HasSuffix(b, []byte("END")) || bytes.Count(b, b[:1]) != size {
					t.Errorf("the file is not one whole version: %d bytes (err %v)", len(b), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".r.json.tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
