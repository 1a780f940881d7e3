// Package atomicfile replaces regular files so that a reader, or a process killed
// at any instant, only ever finds a whole document at the path: the old
// one or the new one, never a truncated mix. A file that is replaced keeps
// what the shell's > would have left it: its owner, group and mode; a file
// that cannot be replaced faithfully (another name links to it, its owner
// cannot be given to a new file, its directory takes no new files) is
// written in place instead.
package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
)

// modeBits are the bits of an existing file's mode its replacement keeps.
const modeBits = os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky

// tmpSeq numbers the temporary files of this process.
var tmpSeq atomic.Int64

// Replace writes a new version of path through a temporary file in the same
// directory, then renames it over path (rename is atomic on POSIX file
// systems). With sync, the data reaches the disk before the rename. A new
// file gets the mode the shell's > gives one (0666 less the umask).
func Replace(path string, sync bool, write func(io.Writer) error) error {
	old, err := os.Stat(path)
	var st *syscall.Stat_t
	if err == nil && old.Mode().IsRegular() {
		st, _ = old.Sys().(*syscall.Stat_t)
		if st != nil && st.Nlink > 1 {
			// Renaming would cut the file off from its other names.
			return InPlace(path, sync, write)
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// One name per call: two writers of one path in a process (a row's
	// rewrite and the last write on a second signal) once shared one, and
	// one renamed the other's half-written file into place.
	tmp := filepath.Join(dir, "."+base+".tmp-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(tmpSeq.Add(1), 10))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_EXCL, 0o666) //nolint:gosec // G302: as the shell's > creates files: the umask decides
	if errors.Is(err, fs.ErrExist) {
		// A temporary file left by a killed run of this pid: ours to replace.
		_ = os.Remove(tmp)
		f, err = os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_EXCL, 0o666) //nolint:gosec // G302: as above
	}
	if err != nil {
		if st != nil && errors.Is(err, fs.ErrPermission) {
			return InPlace(path, sync, write) // a writable file in a directory that takes no new files
		}
		return err
	}
	if st != nil {
		// The replacement is the same file to its readers: owner, group
		// and mode as they were (fchmod ignores the umask).
		err = f.Chmod(old.Mode() & modeBits)
		if err == nil && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
			if cerr := f.Chown(int(st.Uid), int(st.Gid)); cerr != nil {
				f.Close()
				os.Remove(tmp)
				return InPlace(path, sync, write)
			}
		}
	}
	if err == nil {
		err = write(f)
	}
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

// InPlace writes path's new content into the file itself, as the shell's
// > does: owner, mode and links stay, but a reader may see it part written.
func InPlace(path string, sync bool, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
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
	return err
}
