// Package bounded reads the files a user names with a bound on their size:
// a file above it is refused with its size and the bound, before any of it
// is read, instead of filling memory or being cut off silently.
package bounded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"collbench/internal/words"
)

// The bounds by kind of file: a results file or report (a 1,024-host
// doctor report with every figure is tens of MiB), and a config or cluster
// file a person writes.
const (
	Results = int64(1) << 30
	Config  = int64(16) << 20
)

// TooLargeError says a file is larger than its bound.
type TooLargeError struct {
	Path        string
	Size, Limit int64 // Size is -1 where only "more than Limit" is known
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s holds more than %s, the most collbench reads of such a file", e.Path, words.Bytes(e.Limit))
	}
	return fmt.Sprintf("%s is %s, more than the %s collbench reads of such a file", e.Path, words.BytesApprox(e.Size), words.Bytes(e.Limit))
}

// errStdin answers "-" as a path: read as a file named "-", it was "no
// such file".
var errStdin = errors.New("- (standard input) is not read here; name a file")

// ReadFile reads path whole, refusing a regular file above limit by its
// size and any other file (a pipe, a device) once it gives more than limit.
// The errors say what went wrong in words (no such file, permission
// denied), without Go's operation prefix. ctx's end stops a wait on a
// named pipe or a device, with a StoppedError naming the file.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	fh, release, err := Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer release()
	data, err := Read(fh, path, limit)
	if err != nil && ctx.Err() != nil {
		return nil, &StoppedError{Path: path}
	}
	return data, err
}

// Read reads r whole, as ReadFile does; when r is an *os.File of a
// regular file its size is checked first.
func Read(r io.Reader, path string, limit int64) ([]byte, error) {
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
			return nil, &TooLargeError{Path: path, Size: st.Size(), Limit: limit}
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		if u := errors.Unwrap(err); u != nil {
			return nil, u
		}
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &TooLargeError{Path: path, Size: -1, Limit: limit}
	}
	return data, nil
}

// Open opens path for reading, giving up when ctx ends while the open
// waits (a named pipe that no one writes to blocks there). Until release
// is called, ctx's end also closes the file, which ends a read that waits
// on a pipe or a device; regular files need neither.
func Open(ctx context.Context, path string) (fh *os.File, release func(), err error) {
	type opened struct {
		fh  *os.File
		err error
	}
	if path == "-" {
		return nil, nil, errStdin
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path) //nolint:gosec // G304: a file the user named
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			if u := errors.Unwrap(o.err); u != nil {
				return nil, nil, u
			}
			return nil, nil, o.err
		}
		fh = o.fh
	case <-ctx.Done():
		// Where the open has ended too, select picked either at random:
		// the file is open, so the signal came before the first read.
		select {
		case o := <-ch:
			if o.fh != nil {
				_ = o.fh.Close()
				return nil, nil, &StoppedError{Path: path}
			}
		default:
			go func() {
				if o := <-ch; o.fh != nil {
					_ = o.fh.Close()
				}
			}()
		}
		return nil, nil, &StoppedError{Path: path, Opening: true}
	}
	stop := context.AfterFunc(ctx, func() { _ = fh.Close() })
	return fh, func() { stop(); _ = fh.Close() }, nil
}

// StoppedError says a signal (the context's end) stopped the wait for a file.
type StoppedError struct {
	Path    string
	Opening bool
}

func (e *StoppedError) Error() string {
	if e.Opening {
		return fmt.Sprintf("stopped while waiting to open %s (a named pipe that no one writes to?)", e.Path)
	}
	return fmt.Sprintf("stopped while reading %s", e.Path)
}
