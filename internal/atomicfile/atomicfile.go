// Package atomicfile replaces files so that a reader, or a process killed
// at any instant, only ever finds a whole document at the path: the old
// one or the new one, never a truncated mix.
package atomicfile

import (
	"errors"
	"fmt"
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
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
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

// CheckWritable fails, without touching path, when a file cannot be
// created beside it (a missing directory, no permission), so a run can
// refuse before it measures anything.
func CheckWritable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("the directory %s does not exist (create it first)", dir)
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".collbench-probe-*")
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("no permission to create files in %s", dir)
		}
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
