// Package profiler is collbench's NCCL profiler plugin and its reader. The
// plugin (plugin.c, interface versions 4, 5 and 6: NCCL 2.27 and later) is
// compiled into the collbench binary and exported from it, so nothing is
// written to disk or downloaded: with NCCL_PROFILER_PLUGIN=STATIC_PLUGIN,
// NCCL looks the plugin up in the process itself. For one untimed operation
// per row, collbench arms the plugin and reads back what NCCL did: the
// algorithm, protocol and channels of every collective, each channel's
// kernel start and stop on the GPU's clock, and the proxy's network steps
// per peer. Between recordings the activation mask is 0, so NCCL does not
// call the plugin during the timed loops.
package profiler

/*
#cgo LDFLAGS: -rdynamic
#include "plugin.h"
*/
import "C"

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// EnvPlugin is NCCL's variable naming its profiler plugin.
const EnvPlugin = "NCCL_PROFILER_PLUGIN"

// EnvSwitch set to "off" keeps collbench's plugin out of NCCL (the
// algorithms then come from the tuning-log probe).
const EnvSwitch = "COLLBENCH_NCCL_PROFILER"

// StaticPlugin is the NCCL_PROFILER_PLUGIN value that makes NCCL look the
// plugin up in the process (NCCL 2.26 and later).
const StaticPlugin = "STATIC_PLUGIN"

// MinVersion is the first NCCL whose profiler interface (version 4) gives
// the algorithm and the kernel channels' GPU clocks: 2.27.
const MinVersion = 22700

// Mask bits of the events recorded.
const (
	eventColl      = 1 << 1
	eventP2P       = 1 << 2
	eventProxyOp   = 1 << 3
	eventProxyStep = 1 << 4
	eventKernelCh  = 1 << 6
	recordMask     = eventColl | eventP2P | eventProxyOp | eventProxyStep | eventKernelCh
)

// Prepare decides, before NCCL opens its first communicator, whether NCCL
// is to load collbench's plugin, and sets NCCL_PROFILER_PLUGIN if so. It
// returns false and why not (one line for the run's notes): NCCL too old,
// COLLBENCH_NCCL_PROFILER=off, or a plugin of the user's own, which is
// respected.
func Prepare(version int, getenv func(string) string, setenv func(string, string) error) (bool, string) {
	if strings.EqualFold(getenv(EnvSwitch), "off") {
		return false, EnvSwitch + "=off"
	}
	if version < MinVersion {
		return false, fmt.Sprintf("NCCL %d.%d.%d predates the profiler interface collbench reads (2.27)", version/10000, version/100%100, version%100)
	}
	switch v := getenv(EnvPlugin); {
	case v == StaticPlugin:
		// Set by an earlier Prepare, or by a parent collbench.
	case v != "":
		return false, fmt.Sprintf("%s=%s is the user's own plugin and is kept; collbench's recorder is off, so the rows' kernel times are lost", EnvPlugin, v)
	default:
		if err := setenv(EnvPlugin, StaticPlugin); err != nil {
			return false, fmt.Sprintf("cannot set %s: %v", EnvPlugin, err)
		}
	}
	return true, ""
}

// Inits is how many communicator ranks NCCL has introduced to the plugin
// (calls of its init) in this process: a world whose communicators did not
// raise it runs without the plugin.
func Inits() int { return int(C.cbp_inits()) }

// Version is the interface version NCCL loaded the plugin by (4, 5 or 6), 0
// if none.
func Version() int { return int(C.cbp_version()) }

// Comm is one communicator rank as NCCL introduced it to the plugin.
type Comm struct {
	Hash    uint64
	Name    string
	Nodes   int
	Ranks   int
	Rank    int
	Version int
}

// Op is one collective or point-to-point operation NCCL ran while armed.
type Op struct {
	P2P      bool   `json:"p2p,omitempty"`
	Func     string `json:"func"`
	DType    string `json:"dtype,omitempty"`
	Count    uint64 `json:"count"`
	Root     int    `json:"root,omitempty"`
	Peer     int    `json:"peer,omitempty"`
	Algo     string `json:"algo,omitempty"`
	Proto    string `json:"proto,omitempty"`
	Channels int    `json:"channels"`
	// Rank is the rank within the communicator; Comm says which.
	Rank int  `json:"rank"`
	Comm Comm `json:"-"`
	// Send and Recv are the buffers' device addresses (a point-to-point
	// operation's buffer is both).
	Send, Recv uint64 `json:"-"`
	// KernelChannels counts the channels whose kernel reported its start
	// and stop; KernelStart and KernelStop are the earliest start and the
	// latest stop on the GPU's global timer, in ns (0 when none reported).
	KernelChannels int    `json:"kernel_channels"`
	KernelStart    uint64 `json:"kernel_start_ns,omitempty"`
	KernelStop     uint64 `json:"kernel_stop_ns,omitempty"`
	// Enqueued is when the operation was called (NCCL started its event),
	// on the host's monotonic clock in ns; 0 where unknown.
	Enqueued uint64 `json:"enqueued_ns,omitempty"`
	// ClockLo and ClockHi bound the GPU timer's offset from the host's
	// monotonic clock (host minus GPU, in ns), as this operation shows
	// it: its kernel started after it was enqueued, and NCCL's proxy saw
	// each channel start and stop after it did. Both 0 where unknown.
	ClockLo, ClockHi int64 `json:"-"`
	// Net is the proxy's network steps, by peer and direction.
	Net []PeerSteps `json:"net,omitempty"`
}

// PeerSteps sums the proxy's steps with one peer in one direction.
type PeerSteps struct {
	Peer  int   `json:"peer"`
	Send  bool  `json:"send"`
	Steps int   `json:"steps"`
	Bytes int64 `json:"bytes"`
	// BusyNS is the sum of the steps' times and MaxStepNS the longest, on
	// the host's clock.
	BusyNS    uint64 `json:"busy_ns"`
	MaxStepNS uint64 `json:"max_step_ns"`
	// WireNS is how long at least one send step was on the wire (handed
	// to the network until it said done; steps in flight together count
	// once), PeerWaitNS the steps' summed time ready but waiting for the
	// peer's buffer; 0 for receives and where NCCL did not report.
	WireNS     uint64 `json:"wire_ns,omitempty"`
	PeerWaitNS uint64 `json:"peer_wait_ns,omitempty"`
}

var mu sync.Mutex

// Record arms the plugin, runs fn (which issues operations and waits for
// them), disarms it, waits at most wait for the kernel and proxy events of
// those operations to end, and returns the operations recorded, in the
// order NCCL started them. The recordings of concurrent callers do not mix.
// The note is "" or says what is missing (events that did not end in time,
// a full pool); stuck says that events of these operations never ended
// (NCCL's proxy thread is stuck on them).
func Record(fn func() error, wait time.Duration) (ops []Op, note string, stuck bool, err error) {
	mu.Lock()
	defer mu.Unlock()
	C.cbp_reset()
	// Events an earlier recording left unended (a stuck proxy) are not
	// this one's to wait for.
	base := int(C.cbp_pending())
	C.cbp_arm(recordMask)
	err = fn()
	C.cbp_arm(0)
	note = settle(wait, base)
	stuck = int(C.cbp_pending()) > base
	ops = collect()
	if d := int(C.cbp_dropped()); d > 0 {
		note = strings.TrimPrefix(note+fmt.Sprintf("; %d events did not fit the plugin's pool", d), "; ")
	}
	C.cbp_reset()
	return ops, note, stuck, err
}

// settle waits until every kernel and proxy event has ended and every
// operation's kernel has reported, or wait has passed. NCCL starts an
// operation's event as it is issued, so with none recorded by now (a
// communicator of one rank, which NCCL serves with a copy) there is
// nothing to wait for; an operation whose kernel never reports (older
// interface builds) ends the wait after 10 ms without news.
func settle(wait time.Duration, base int) string {
	deadline := time.Now().Add(wait)
	last, quiet := -1, time.Now()
	for {
		pending, n := int(C.cbp_pending())-base, int(C.cbp_events())
		ops, done := complete()
		if pending <= 0 && (ops == 0 || done) {
			return ""
		}
		if n != last {
			last, quiet = n, time.Now()
		} else if pending <= 0 && time.Since(quiet) > 10*time.Millisecond {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%d kernel or network events of NCCL had not ended %s after the operation", max(pending, 0), wait)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// complete counts the operations recorded and says whether every one has
// kernel events.
func complete() (int, bool) {
	n := int(C.cbp_events())
	has := make(map[int]bool)
	var opIdx []int
	var e C.cbp_event
	for i := 0; i < n; i++ {
		if C.cbp_get_event(C.int(i), &e) != 0 {
			continue
		}
		switch int(e.kind) {
		case C.CBP_KIND_COLL, C.CBP_KIND_P2P:
			opIdx = append(opIdx, i)
		case C.CBP_KIND_KERNEL_CH:
			if e.stopped != 0 && e.parent >= 0 {
				has[int(e.parent)] = true
			}
		}
	}
	for _, i := range opIdx {
		if !has[i] {
			return len(opIdx), false
		}
	}
	return len(opIdx), true
}

func collect() []Op {
	n := int(C.cbp_events())
	evs := make([]C.cbp_event, n)
	for i := range evs {
		if C.cbp_get_event(C.int(i), &evs[i]) != 0 {
			evs[i].kind = 0
		}
	}
	comms := map[int]Comm{}
	comm := func(ci int) Comm {
		if c, ok := comms[ci]; ok {
			return c
		}
		var cc C.cbp_context
		var c Comm
		if C.cbp_get_context(C.int(ci), &cc) == 0 {
			c = Comm{Hash: uint64(cc.comm_hash), Name: C.GoString(&cc.name[0]), Nodes: int(cc.nodes), Ranks: int(cc.ranks), Rank: int(cc.rank), Version: int(cc.version)}
		}
		comms[ci] = c
		return c
	}
	return assemble(evs, comm)
}

// assemble turns the events into operations: kernel channels and proxy
// operations join their operation, proxy steps their proxy operation.
func assemble(evs []C.cbp_event, comm func(int) Comm) []Op {
	var ops []Op
	at := map[int]int{} // event index -> op index
	for i := range evs {
		e := &evs[i]
		k := int(e.kind)
		if k != C.CBP_KIND_COLL && k != C.CBP_KIND_P2P {
			continue
		}
		op := Op{P2P: k == C.CBP_KIND_P2P, Func: C.GoString(&e.fn[0]), DType: C.GoString(&e.dtype[0]), Count: uint64(e.count),
			Root: int(e.root), Peer: int(e.peer), Algo: C.GoString(&e.algo[0]), Proto: C.GoString(&e.proto[0]),
			Channels: int(e.channels), Rank: int(e.rank), Comm: comm(int(e.ctx)), Send: uint64(e.send), Recv: uint64(e.recv), Enqueued: uint64(e.host_start)}
		at[i] = len(ops)
		ops = append(ops, op)
	}
	owner := func(parent C.int) (int, bool) {
		oi, ok := at[int(parent)]
		return oi, ok
	}
	type key struct {
		op, peer int
		send     bool
	}
	proxyOf := map[int]key{}
	net := map[key]*PeerSteps{}
	wire := map[key][][2]uint64{} // each send step's time on the wire
	for i := range evs {
		e := &evs[i]
		switch int(e.kind) {
		case C.CBP_KIND_KERNEL_CH:
			oi, ok := owner(e.parent)
			if !ok || e.stopped == 0 || e.gpu_stop == 0 {
				continue
			}
			op := &ops[oi]
			bound(op, &evs[int(e.parent)], e)
			if op.KernelChannels == 0 || uint64(e.gpu_start) < op.KernelStart {
				op.KernelStart = uint64(e.gpu_start)
			}
			op.KernelStop = max(op.KernelStop, uint64(e.gpu_stop))
			op.KernelChannels++
		case C.CBP_KIND_PROXY_OP:
			oi, ok := owner(e.parent)
			if !ok {
				continue
			}
			k := key{oi, int(e.peer), e.is_send != 0}
			proxyOf[i] = k
			if net[k] == nil {
				net[k] = &PeerSteps{Peer: k.peer, Send: k.send}
			}
		}
	}
	for i := range evs {
		e := &evs[i]
		if int(e.kind) != C.CBP_KIND_PROXY_STEP || e.stopped == 0 {
			continue
		}
		k, ok := proxyOf[int(e.parent)]
		if !ok {
			continue
		}
		ps := net[k]
		ps.Steps++
		ps.Bytes += int64(e.trans_size)
		if e.host_stop > e.host_start {
			d := uint64(e.host_stop - e.host_start)
			ps.BusyNS += d
			ps.MaxStepNS = max(ps.MaxStepNS, d)
		}
		if e.wire_at > 0 && e.host_stop > e.wire_at {
			wire[k] = append(wire[k], [2]uint64{uint64(e.wire_at), uint64(e.host_stop)})
			if e.peer_wait_at > 0 && e.wire_at > e.peer_wait_at {
				ps.PeerWaitNS += uint64(e.wire_at - e.peer_wait_at)
			}
		}
	}
	for k, ps := range net {
		ps.WireNS = covered(wire[k])
		ops[k.op].Net = append(ops[k.op].Net, *ps)
	}
	for i := range ops {
		sort.Slice(ops[i].Net, func(a, b int) bool {
			x, y := ops[i].Net[a], ops[i].Net[b]
			if x.Peer != y.Peer {
				return x.Peer < y.Peer
			}
			return x.Send && !y.Send
		})
	}
	return ops
}

// bound narrows op's clock offset bounds with one kernel channel ch of
// the operation event parent: the offset is at least the enqueue time less
// the channel's GPU start, and at most the host time the proxy saw the
// channel start (or stop) less its GPU start (or stop).
func bound(op *Op, parent, ch *C.cbp_event) {
	if parent.host_start == 0 || ch.host_start == 0 || ch.gpu_start == 0 {
		return
	}
	lo := int64(parent.host_start) - int64(ch.gpu_start)
	hi := int64(ch.host_start) - int64(ch.gpu_start)
	if ch.host_stop != 0 && ch.gpu_stop != 0 {
		hi = min(hi, int64(ch.host_stop)-int64(ch.gpu_stop))
	}
	if op.ClockLo == 0 && op.ClockHi == 0 {
		op.ClockLo, op.ClockHi = lo, hi
		return
	}
	op.ClockLo, op.ClockHi = max(op.ClockLo, lo), min(op.ClockHi, hi)
}

// covered is the length of the union of the intervals [start, stop).
func covered(iv [][2]uint64) uint64 {
	sort.Slice(iv, func(a, b int) bool { return iv[a][0] < iv[b][0] })
	var total, end uint64
	for _, x := range iv {
		if x[1] <= end {
			continue
		}
		if x[0] > end {
			end = x[0]
		}
		total += x[1] - end
		end = x[1]
	}
	return total
}
