package nccl

import (
	"fmt"
	"strings"
	"time"

	"collbench/internal/hostclock"
	"collbench/internal/words"
	"collbench/measure"

	"collbench/backend/nccl/profiler"
	"collbench/results"
)

// EnvProfiler set to "off" keeps collbench's profiler plugin out of NCCL
// (the algorithms then come from the tuning-log probe).
const EnvProfiler = profiler.EnvSwitch

// recordWait bounds the wait, after an operation, for NCCL's proxy to
// deliver its kernel and network events.
const recordWait = 2 * time.Second

// wedgedNote says why a world records no more.
const wedgedNote = "NCCL's proxy thread never ended the events of a recorded operation: nothing more is recorded, and the communicators are aborted at the end instead of destroyed"

// p2pRecordLimit is the row size from which an exchange of grouped sends
// and receives with every peer (alltoall, alltoallv, gather, scatter) is
// not recorded. On 4x H200 with NCCL 2.28.3, recording alltoall of 512 MiB
// and up (128 MiB per peer, 1 GiB sent and received per rank), alltoallv
// of 1 GiB and alltoall of 1 GiB on 2 GPUs left NCCL's proxy thread stuck
// on the operation's kernel events: the run measured, then never returned
// from ncclCommDestroy. alltoall of 448 MiB and gather and scatter of
// 512 MiB recorded cleanly; the limit keeps a factor of two below the
// first failure.
const p2pRecordLimit = 256 << 20

// Recordable says why an operation of c at a row of size bytes is not
// recorded, or "".
func (w *world) Recordable(c measure.Collective, size int64) string {
	switch c {
	case measure.AllToAll, measure.AllToAllV, measure.Gather, measure.Scatter:
		if size >= p2pRecordLimit {
			return fmt.Sprintf("%s rows of %s and more are not recorded (no algorithm or kernel times): NCCL's profiler leaves its proxy thread stuck after large exchanges with every peer", c, words.BytesApprox(p2pRecordLimit))
		}
	}
	return ""
}

// Algorithm names the algorithm of the collectives NCCL builds from sends
// and receives (P2P), at every size and whether recorded or not, as the
// tuning-log probe does; for the others NCCL's record or log tells, and it
// gives nil.
func (w *world) Algorithm(c measure.Collective, bytes int64, ranks int) *results.AlgoChoice {
	if ranks < 2 || bytes == 0 || LogsChoice(c) {
		return nil
	}
	return P2PChoice()
}

// Records says whether this backend's worlds record what NCCL did through
// collbench's profiler plugin, and if not, why.
func (b *Backend) Records() (bool, string) { return b.profOn, b.profWhy }

// Recording says whether NCCL loaded the plugin for this world's
// communicators.
func (w *world) Recording() (bool, string) {
	if !w.b.profOn {
		return false, w.b.profWhy
	}
	if w.wedged.Load() {
		return false, wedgedNote
	}
	if profiler.Inits() <= w.profInits {
		return false, fmt.Sprintf("NCCL did not load collbench's profiler plugin (%s=%s)", profiler.EnvPlugin, profiler.StaticPlugin)
	}
	return true, ""
}

// Record runs fn with the plugin armed and gives each local rank the
// operations recorded on its buffers: the algorithm of its first
// collective, its kernels' first start and last stop, and its network
// steps per peer.
func (w *world) Record(fn func() error) ([]*results.OpRecord, string, error) {
	ops, note, stuck, err := profiler.Record(fn, recordWait)
	if stuck {
		// NCCL's proxy never ended the events: it is stuck on them, and
		// would hold every later destroy of these communicators.
		w.wedged.Store(true)
		note = strings.TrimPrefix(note+"; "+wedgedNote, "; ")
	}
	out := make([]*results.OpRecord, len(w.ranks))
	for i := range ops {
		op := &ops[i]
		for ri, r := range w.ranks {
			if !r.owns(op.Recv) && !r.owns(op.Send) {
				continue
			}
			if out[ri] == nil {
				out[ri] = &results.OpRecord{}
			}
			merge(out[ri], op)
			break
		}
	}
	return out, note, err
}

// merge adds one operation to a rank's record.
func merge(rec *results.OpRecord, op *profiler.Op) {
	if rec.Algorithm == nil && !op.P2P && op.Algo != "" {
		rec.Algorithm = &results.AlgoChoice{Algo: op.Algo, Proto: op.Proto, Channels: fmt.Sprint(op.Channels), Source: "NCCL profiler plugin"}
	}
	if op.Enqueued > 0 && (rec.EnqueueNS == 0 || op.Enqueued < rec.EnqueueNS) {
		rec.EnqueueNS, rec.Clock = op.Enqueued, hostclock.ID()
	}
	if op.KernelChannels > 0 {
		if op.ClockLo != 0 || op.ClockHi != 0 {
			if rec.ClockLoNS == 0 && rec.ClockHiNS == 0 {
				rec.ClockLoNS, rec.ClockHiNS, rec.Clock = op.ClockLo, op.ClockHi, hostclock.ID()
			} else {
				rec.ClockLoNS, rec.ClockHiNS = max(rec.ClockLoNS, op.ClockLo), min(rec.ClockHiNS, op.ClockHi)
			}
		}
		if rec.Channels == 0 || op.KernelStart < rec.StartNS {
			rec.StartNS = op.KernelStart
		}
		rec.StopNS = max(rec.StopNS, op.KernelStop)
		rec.Channels = max(rec.Channels, op.KernelChannels)
	}
	for _, ps := range op.Net {
		add := results.NetSteps{Peer: ps.Peer, Send: ps.Send, Steps: ps.Steps, Bytes: ps.Bytes,
			BusyUS: float64(ps.BusyNS) / 1e3, MaxStepUS: float64(ps.MaxStepNS) / 1e3,
			WireUS: float64(ps.WireNS) / 1e3, PeerWaitUS: float64(ps.PeerWaitNS) / 1e3}
		merged := false
		for j := range rec.Net {
			n := &rec.Net[j]
			if n.Peer == add.Peer && n.Send == add.Send {
				n.Steps += add.Steps
				n.Bytes += add.Bytes
				n.BusyUS += add.BusyUS
				n.WireUS += add.WireUS
				n.PeerWaitUS += add.PeerWaitUS
				n.MaxStepUS = max(n.MaxStepUS, add.MaxStepUS)
				merged = true
				break
			}
		}
		if !merged {
			rec.Net = append(rec.Net, add)
		}
	}
}
