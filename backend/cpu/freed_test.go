package cpu

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"collbench/dtype"
	"collbench/measure"
)

// TestAbortedPeerFreesNothingAPeerStillReads plants, at several places, a
// rank that leaves an aborted operation and frees its buffers while a peer
// is inside a step that reads them: the peer must read mapped memory (the
// whole process once ended on "unexpected fault address" in CI, a peer of
// an aborted allreduce reading a freed send buffer).
func TestAbortedPeerFreesNothingAPeerStillReads(t *testing.T) {
	cases := []struct {
		coll           measure.Collective
		leaver, reader int
	}{
		{measure.AllReduce, 0, 1},
		{measure.AllReduce, 2, 0},
		{measure.ReduceScatter, 1, 2},
		{measure.Broadcast, 0, 2}, // the leaver is the root whose send the others copy
		{measure.AllGather, 2, 1},
		{measure.AllToAll, 0, 1}, // the reader copies from rank 0 first
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/leaver=%d/reader=%d", tc.coll, tc.leaver, tc.reader), func(t *testing.T) {
			runLeaver(t, tc.coll, tc.leaver, tc.reader)
		})
	}
}

// runLeaver runs coll on three ranks with the plant and fails t where a
// rank read unmapped memory or the plant did not meet both ranks.
func runLeaver(t *testing.T, coll measure.Collective, leaver, reader int) {
	t.Helper()
	const n = 3
	w, err := New(Options{}).Open(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	entered, freed := make(chan struct{}), make(chan struct{})
	var readerOnce, leaverOnce sync.Once
	var met [2]bool // the reader and the leaver reached their steps
	stepHook = func(wr int) {
		switch wr {
		case reader:
			readerOnce.Do(func() {
				met[0] = true
				close(entered)
				select { // the leaver's free, bounded
				case <-freed:
				case <-time.After(20 * time.Second):
				}
			})
		case leaver:
			leaverOnce.Do(func() {
				met[1] = true
				select {
				case <-entered:
				case <-time.After(20 * time.Second):
				}
				w.(*world).Abort(errors.New("planted abort"))
			})
		}
	}
	defer func() { stepHook = nil }()
	count := int64(1 << 18)
	g := measure.CallGeometry(measure.Call{Coll: coll, DType: dtype.Float32, Count: count}, n)
	faults := make([]error, n)
	_ = w.Run(func(r measure.Rank) (err error) {
		me := r.WorldRank()
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("rank %d read unmapped memory: %v", me, v)
				faults[me] = err
			}
		}()
		debug.SetPanicOnFault(true)
		send, err := r.Alloc(g.SendCount * 4)
		if err != nil {
			return err
		}
		recv, err := r.Alloc(g.RecvCount * 4)
		if err != nil {
			return err
		}
		err = r.Launch(measure.Call{Coll: coll, DType: dtype.Float32, Op: measure.Sum, Count: count,
			Root: leaver, Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}})
		_ = r.Free(send)
		_ = r.Free(recv)
		if me == leaver {
			close(freed)
		}
		return err
	})
	for _, e := range faults {
		if e != nil {
			t.Error(e)
		}
	}
	if m := w.(*world).mem; m.inside != 0 || len(m.freed) != 0 {
		t.Errorf("after the run %d ranks are inside an exchange and %d freed buffers still mapped", m.inside, len(m.freed))
	}
	if !met[0] || !met[1] {
		t.Errorf("the plant did not take: reader at a step %v, leaver at a step %v", met[0], met[1])
	}
}
