package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// WriteFrame writes one frame of the control connection's framing (a type
// byte, a 4-byte length, the payload) to w; other pipes between collbench
// processes use it too.
func WriteFrame(w io.Writer, typ byte, payload []byte) error { return writeFrameTo(w, typ, payload) }

// ReadFrame reads one frame written by WriteFrame, refusing a payload over
// limit bytes.
func ReadFrame(r io.Reader, limit uint32) (byte, []byte, error) { return readFrame(r, limit) }

func writeFrameTo(w io.Writer, typ byte, payload []byte) error {
	if uint64(len(payload)) > math.MaxUint32 {
		return fmt.Errorf("a frame of %d bytes is over the 4 GiB a frame can carry", len(payload))
	}
	var hdr [5]byte
	hdr[0] = typ                                                 //nolint:gosec // G602: a 5-byte array, index 0
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(payload))) //nolint:gosec // G115: checked just above
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func readFrame(r io.Reader, limit uint32) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[1:])
	if n > limit {
		return 0, nil, fmt.Errorf("control message of %d bytes is over the %d-byte limit", n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return hdr[0], buf, nil
}

// queue holds a peer's data frames; the reader never blocks on it, so
// heartbeats are read however far behind the caller is.
type queue struct {
	mu    sync.Mutex
	items [][]byte
	ready chan struct{} // has a token while items is non-empty
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) push(b []byte) {
	q.mu.Lock()
	q.items = append(q.items, b)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) pop() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, false
	}
	b := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	if len(q.items) > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return b, true
}

func encodeList(items [][]byte) []byte {
	n := 4
	for _, it := range items {
		n += 4 + len(it)
	}
	out := make([]byte, 0, n)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(items))) //nolint:gosec // G115: list lengths within one frame, itself under 4 GiB
	for _, it := range items {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(it))) //nolint:gosec // G115: list lengths within one frame, itself under 4 GiB
		out = append(out, it...)
	}
	return out
}

func decodeList(b []byte) ([][]byte, error) {
	bad := errors.New("malformed control message")
	if len(b) < 4 {
		return nil, bad
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b)/4+1 {
		return nil, bad
	}
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return nil, bad
		}
		l := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if len(b) < l {
			return nil, bad
		}
		out = append(out, b[:l:l])
		b = b[l:]
	}
	return out, nil
}
