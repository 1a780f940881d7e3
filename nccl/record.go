package nccl

import (
	"fmt"
	"time"

	"collbench/nccl/profiler"
	"collbench/results"
)

// recordWait bounds the wait, after an operation, for NCCL's proxy to
// deliver its kernel and network events.
const recordWait = 2 * time.Second

// Records says whether this backend's worlds record what NCCL did through
// collbench's profiler plugin, and if not, why.
func (b *Backend) Records() (bool, string) { return b.profOn, b.profWhy }

// Recording says whether NCCL loaded the plugin for this world's
// communicators.
func (w *world) Recording() (bool, string) {
	if !w.b.profOn {
		return false, w.b.profWhy
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
	ops, note, err := profiler.Record(fn, recordWait)
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
	if op.KernelChannels > 0 {
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
