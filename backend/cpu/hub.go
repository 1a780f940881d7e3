package cpu

import (
	"fmt"

	"collbench/internal/reduce"
	"collbench/internal/syncx"
	"collbench/measure"
	"collbench/watchdog"
)

// slot is what one rank posts for the operation in progress.
type slot struct {
	send, recv []byte
}

// hub is where the ranks of one communicator meet to exchange data.
type hub struct {
	n       int
	bar     *syncx.Barrier
	slots   []slot
	scratch []byte
}

func newHub(n int) *hub {
	return &hub{n: n, bar: syncx.NewBarrier(n), slots: make([]slot, n)}
}

func (h *hub) abort(err error) { h.bar.Abort(err) }

// stepHook, when a test sets it, is called by a rank at each step of an
// exchange, after it has looked for an abort and before it touches its
// peers' buffers.
var stepHook func(worldRank int)

// chunk returns the element range of part i of count split n ways.
func chunk(count int64, i, n int) (lo, hi int64) {
	return count * int64(i) / int64(n), count * int64(i+1) / int64(n)
}

// wait is the hub's barrier, marked on the rank's progress record.
func (h *hub) wait(rk *rank) error {
	rk.track.Waiting(watchdog.WaitingAll)
	err := h.bar.Wait()
	rk.track.Waiting(watchdog.NotWaiting)
	return err
}

// run performs c as rank rk and returns its output bytes (nil where the
// collective defines none, e.g. non-root ranks of reduce).
func (h *hub) run(rk *rank, c measure.Call) ([]byte, error) {
	r := rk.id
	esz := int64(c.DType.Size())
	n := h.n
	g := measure.CallGeometry(c, n)
	send, err := span(c.Send, g.SendCount*esz)
	if err != nil {
		return nil, err
	}
	recv, err := span(c.Recv, g.RecvCount*esz)
	if err != nil {
		return nil, err
	}
	inPlace := c.Send.Buf == c.Recv.Buf
	staged := inPlace && ops[c.Coll].staged
	if r == 0 && staged {
		if need := int64(n) * g.SendCount * esz; int64(len(h.scratch)) < need {
			h.scratch = make([]byte, need)
		}
	}
	h.slots[r] = slot{send: send, recv: recv}
	if err := h.wait(rk); err != nil {
		return nil, err
	}
	if staged {
		// Snapshot every input before anyone overwrites it.
		sb := g.SendCount * esz
		if err := rk.copyOrStop(h.scratch[int64(r)*sb:int64(r+1)*sb], send); err != nil {
			return nil, err
		}
		h.slots[r].send = h.scratch[int64(r)*sb : int64(r+1)*sb]
		if err := h.wait(rk); err != nil {
			return nil, err
		}
	}
	o, ok := ops[c.Coll]
	if !ok || o.hub == nil {
		return nil, fmt.Errorf("cpu backend: collective %v not implemented", c.Coll)
	}
	out, err := o.hub(h, rk, c, g, send, recv)
	if err != nil {
		return nil, err
	}
	if err := h.wait(rk); err != nil {
		return nil, err
	}
	return out, nil
}

// reduceChunk writes into dst the reduction over all ranks of bytes [lo,hi)
// of their send buffers. self names the rank whose send bytes may alias dst,
// so its contribution is taken first. It works in steps, looking at the
// world's abort between them.
func (h *hub) reduceChunk(rk *rank, dst []byte, self int, lo, hi int64, c measure.Call) error {
	stepBytes := int64(step * c.DType.Size())
	for off := lo; off < hi; off += stepBytes {
		if err := rk.w.stopped(); err != nil {
			return err
		}
		if stepHook != nil {
			stepHook(rk.worldRank)
		}
		end := min(off+stepBytes, hi)
		d := dst[off-lo : end-lo]
		src := h.slots[self].send[off:end]
		if !sameStart(src, d) {
			copy(d, src)
		}
		for p := 0; p < h.n; p++ {
			if p != self {
				reduce.Into(d, h.slots[p].send[off:end], c.DType, c.Op)
			}
		}
		if c.Op == measure.Avg {
			reduce.Divide(d, c.DType, h.n)
		}
		rk.track.Moved()
	}
	return nil
}

func sameStart(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}
