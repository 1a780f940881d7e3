// Package atomicfile replaces regular files so that a reader, or a process killed
// at any instant, only ever finds a whole document at the path: the old
// one or the new one, never a truncated mix.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Replace writes a new version of path through a temporary file in the same
// directory, then renames it over path (rename is atomic on POSIX file
// systems). With sync, the data reaches the disk before the rename.
func Replace(path string, sync bool, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp := filepath.Join(dir, "."+base+".tmp-"+strconv.Itoa(os.Getpid()))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644) //nolint:gosec // results and reports are for others to read, as files written by any tool
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
