package nccl

import (
	"encoding/binary"
	"hash/fnv"
	"time"

	"collbench/backend/nccl/driver"
	"collbench/internal/hostclock"
	"collbench/measure"
	"collbench/watch"
)

// SetWatch sends sink a summary of every operation the backend's ranks
// issue, naming host as theirs. The times are the host's: when the rank's
// thread handed NCCL the operation, and when that call returned. Without
// the profiler's kernel times a rank is judged by when it issued, which is
// what a straggling host moves (the planted fault late-rank).
func (b *Backend) SetWatch(sink watch.Sink, host string) {
	b.watch, b.watchHost = sink, host
}

// issueErr is how far apart the ranks of collbench's own harness issue
// the same operation with nothing wrong: their threads leave each sync and
// barrier, and rank 0 does the row's bookkeeping, at times apart by up to
// about 120 us on a busy host (measured on the fake machine on 2 cores). It
// is each summary's error, so that the judge names a rank only beyond it.
const issueErr = 100 * time.Microsecond

// commID names a communicator created from id alike on every rank.
func commID(id driver.UniqueID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(id[:])
	return h.Sum64()
}

// splitID names the communicator of group g split from parent, alike on
// every rank of the group.
func splitID(parent uint64, g int) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], uint64(g)) //nolint:gosec // G115: a group index, not negative
	h := fnv.New64a()
	_, _ = h.Write(b[:])
	return h.Sum64()
}

// issued sends the summary of the operation of collective coll the rank
// started issuing at at (called only where the backend is watched). Operations captured into
// a CUDA graph run later, so they are not sent.
func (r *rank) issued(at time.Time, coll measure.Collective) {
	sink := r.w.b.watch
	if sink == nil || r.capturing {
		return
	}
	r.watchSeq++
	ns := at.UnixNano()
	sink.Send(watch.Summary{Comm: r.watchComm, Seq: r.watchSeq, Ranks: r.size, Rank: r.id, Host: r.w.b.watchHost, GPU: r.dev.busID,
		Func: coll.String(), IssueNS: ns, StartNS: ns, EndNS: time.Now().UnixNano(), ErrNS: issueErr.Nanoseconds(), Clock: hostclock.ID()})
}
