package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
