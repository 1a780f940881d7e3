// This file is the one writer behind every output path a user names
// (-o, --prom, --html, --record). It writes only as asked:
//
//   - a regular file, or a path that does not exist yet, is written to a
//     temporary file beside it and renamed into place, so a reader or a
//     killed process only ever finds a whole document; the file keeps its
//     owner, group, mode and links (where a new file cannot have them, it
//     is written in place, as the shell's > does);
//   - a file this user may not write is refused, as the shell's > refuses
//     it;
//   - a symbolic link is followed, and its target written the same way: the
//     link stays a link;
//   - a character device, a named pipe, a socket, "-", /dev/stdout,
//     /dev/stderr and /dev/fd/N are streams: opened and written through,
//     never replaced;
//   - a directory, a block device, a missing directory or a path without
//     write permission is refused before anything runs, by the path the
//     user gave.

package results

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"collbench/internal/atomicfile"
)

// OutputKind is what a target path is.
type OutputKind int

// The kinds of target.
const (
	RegularFile  OutputKind = iota // a regular file or a new path: replaced atomically
	StreamOutput                   // a device, pipe, socket or open descriptor: written through
)

// PipeReaderWait bounds how long a write waits for a process to open a named
// pipe for reading.
var PipeReaderWait = 30 * time.Second

// Output is a resolved output path.
type Output struct {
	// Given is the path as the user gave it; every error names it.
	Given string
	// Path is where the data goes once symbolic links are followed.
	Path       string
	OutputKind OutputKind
	// fd is an open descriptor of this process to write to (-1: none).
	fd int
	// mode is the file type of Path for streams.
	mode os.FileMode
}

// stdoutFD is the descriptor "-" and /dev/stdout write to.
const stdoutFD = 1

var fdPath = regexp.MustCompile(`^/(?:proc/(?:self|thread-self|[0-9]+)|dev)/fd/([0-9]+)$`)

// ResolveOutput follows path to what it names and checks that it can be written,
// without creating or changing anything. Its errors name the path given
// and what to do.
func ResolveOutput(path string) (*Output, error) {
	if path == "" {
		return nil, errors.New("an empty output path (name a file, or - for standard output)")
	}
	t := &Output{Given: path, fd: -1}
	if path == "-" || path == "/dev/stdout" {
		t.OutputKind, t.Path, t.fd = StreamOutput, path, stdoutFD
		return t, nil
	}
	if path == "/dev/stderr" {
		t.OutputKind, t.Path, t.fd = StreamOutput, path, 2
		return t, nil
	}
	p := path
	for hops := 0; ; hops++ {
		if hops > 40 {
			return nil, fmt.Errorf("%s: too many levels of symbolic links", path)
		}
		if m := fdPath.FindStringSubmatch(p); m != nil {
			n, err := strconv.Atoi(m[1])
			if err != nil || !fdOwned(m[0]) {
				return nil, fmt.Errorf("%s names another process's descriptor; name a file instead", path)
			}
			if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err != nil {
				return nil, fmt.Errorf("%s: descriptor %d is not open in this process", path, n)
			}
			t.OutputKind, t.Path, t.fd = StreamOutput, p, n
			return t, nil
		}
		if fs := kernelFS(p); fs != "" {
			return nil, fmt.Errorf("%s is under %s, the kernel's interface, not a file: name a file", path, fs)
		}
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			t.OutputKind, t.Path = RegularFile, p
			return t, checkDir(path, p)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s", path, OutputReason(err))
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			dest, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %s", path, OutputReason(err))
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(filepath.Dir(p), dest)
			}
			p = dest
			continue
		}
		t.Path = p
		switch m := fi.Mode(); {
		case m.IsDir():
			return nil, fmt.Errorf("%s is a directory; name a file in it", path)
		case m.IsRegular():
			t.OutputKind = RegularFile
			// As the shell's > would: a file this user may not write is
			// refused; one it may write is written, in place if its
			// directory takes no new files (atomicfile.Replace).
			if err := canWrite(p); err != nil {
				return nil, fmt.Errorf("%s: permission denied: this user may not write the file (its mode is %v); name another file, or change its mode", path, m.Perm())
			}
			return t, nil
		case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
			return nil, fmt.Errorf("%s is a block device; collbench does not write results onto disks, name a file", path)
		case m&(os.ModeCharDevice|os.ModeNamedPipe|os.ModeSocket) != 0:
			t.OutputKind, t.mode = StreamOutput, m.Type()
			if m&os.ModeSocket == 0 {
				if err := unix.Access(p, unix.W_OK); err != nil {
					return nil, fmt.Errorf("%s: no permission to write to it", path)
				}
			}
			return t, nil
		default:
			return nil, fmt.Errorf("%s is neither a file, a device, a pipe nor a socket; name a file", path)
		}
	}
}

// kernelFS is /proc or /sys where p lies under it (its own descriptors,
// /proc/self/fd/N, are told apart before), else "": a results file
// there is never one (-o /proc/self/status ran, then failed).
func kernelFS(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	for _, fs := range []string{"/proc", "/sys"} {
		if abs == fs || strings.HasPrefix(abs, fs+"/") {
			return fs
		}
	}
	return ""
}

// canWrite says whether this process's effective user may write the file
// at p, as the kernel decides (root may write a file of mode 0444).
var canWrite = func(p string) error { return unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, unix.AT_EACCESS) }

// fdOwned says whether a /proc/PID/fd path is this process's.
func fdOwned(p string) bool {
	var pid int
	if _, err := fmt.Sscanf(p, "/proc/%d/", &pid); err == nil {
		return pid == os.Getpid()
	}
	return true // /dev/fd, /proc/self, /proc/thread-self
}

// checkDir checks that a file can be renamed into place at real: its
// directory exists and may be written.
func checkDir(given, real string) error {
	dir := filepath.Dir(real)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: the directory %s does not exist (create it first)", given, dir)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", given, dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s: no permission to create files in %s", given, dir)
	}
	return nil
}

// Replaced says the target is a regular file (or a new path), replaced
// whole on every write; otherwise it is a stream, written through.
func (t *Output) Replaced() bool { return t != nil && t.OutputKind == RegularFile }

// IsStdout says whether the target is this process's standard output, so a
// command can leave its own stdout report out rather than mix the two.
func (t *Output) IsStdout() bool { return t != nil && t.OutputKind == StreamOutput && t.fd == stdoutFD }

// Write writes one whole document to the target: atomically (synced first
// with sync) for a file, through for a stream.
func (t *Output) Write(sync bool, write func(io.Writer) error) error {
	if t.OutputKind == RegularFile {
		if err := atomicfile.Replace(t.Path, sync, write); err != nil {
			return fmt.Errorf("writing %s: %s", t.Given, OutputReason(err))
		}
		return nil
	}
	w, closeFn, err := t.open()
	if err != nil {
		return fmt.Errorf("writing %s: %s", t.Given, OutputReason(err))
	}
	err = write(w)
	if cerr := closeFn(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %s", t.Given, OutputReason(err))
	}
	return nil
}

// open opens a stream for writing. An open descriptor is duplicated, so
// closing the copy leaves the process's own open; a named pipe waits at
// most PipeReaderWait for a reader.
func (t *Output) open() (io.Writer, func() error, error) {
	if t.fd >= 0 {
		nfd, err := unix.Dup(t.fd)
		if err != nil {
			return nil, nil, err
		}
		f := os.NewFile(uintptr(nfd), t.Given)
		return f, f.Close, nil
	}
	switch {
	case t.mode&os.ModeSocket != 0:
		c, err := net.DialTimeout("unix", t.Path, 10*time.Second)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	case t.mode&os.ModeNamedPipe != 0:
		deadline := time.Now().Add(PipeReaderWait)
		for {
			fd, err := unix.Open(t.Path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err == nil {
				if err := unix.SetNonblock(fd, false); err != nil {
					unix.Close(fd)
					return nil, nil, err
				}
				f := os.NewFile(uintptr(fd), t.Given)
				return f, f.Close, nil
			}
			if !errors.Is(err, unix.ENXIO) {
				return nil, nil, err
			}
			if time.Now().After(deadline) {
				return nil, nil, fmt.Errorf("no process opened the named pipe for reading within %s", PipeReaderWait)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	f, err := os.OpenFile(t.Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

// OutputReason is an operating-system error in words, without Go's wrapping of
// the operation and path (the caller names the path the user gave).
func OutputReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		err = se.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
		if errors.As(err, &se) {
			err = se.Err
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOSPC:
			return "no space left on the device"
		case syscall.EACCES, syscall.EPERM:
			return "no permission"
		case syscall.EROFS:
			return "the file system is read-only"
		case syscall.EPIPE:
			return "the reader closed the pipe"
		}
	}
	return err.Error()
}
