// Command collbench-watch-plugin is collbench watch's NCCL profiler plugin,
// built as a shared library (make plugin: bin/libcollbench-watch.so) that
// any NCCL application loads with NCCL_PROFILER_PLUGIN set to its path.
// With COLLBENCH_WATCH=host:port and the job's secret (COLLBENCH_TOKEN or
// COLLBENCH_TOKEN_FILE) it sends a summary of every collective of every
// communicator in the process to that collector: when the rank handed it
// to NCCL and when its kernel started and ended, the GPU's timer aligned
// to the host's clock (watch.Aligner), and, for one operation in
// CBW_LINK_EVERY, what it sent each peer over the network and the time
// those sends spent on the wire (NCCL's proxy steps); and, four times a
// second, its GPU's NVLink counters beside a bound of what the process's
// own operations put on those links (nvlink.go, nvlink.c). Without COLLBENCH_WATCH it asks
// NCCL for no event at all. It never makes the job wait: NCCL's calls
// only write into a ring per communicator (plugin.c); a goroutine takes
// finished operations from the rings and queues their summaries to
// watch.Sender, which drops what it cannot send.
//
// The library also carries collbench's NCCL tuner (tuner.go): with
// NCCL_TUNER_PLUGIN set to its path and COLLBENCH_TUNER_FILE naming a file
// collbench tune wrote, NCCL runs each operation with the file's choice.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../backend/nccl/profiler -I${SRCDIR}/../../backend/nccl/tuner -O2
#cgo LDFLAGS: -ldl
#include "watchplugin.h"
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"collbench/internal/hostclock"
	"collbench/watch"
)

// pollEvery is how often the rings are read; giveUp how long an operation
// may wait for its last kernel channel before it is dropped.
const (
	pollEvery = 20 * time.Millisecond
	giveUp    = 10 * time.Second
)

var configure sync.Once

// running is the process's collector of finished operations once
// configured with a collector to send to (nil otherwise).
var running atomic.Pointer[taker]

// cbwConfigure reads the environment once, on NCCL's first call, and
// enables the NCCL side when a collector and the job's secret are given.
//
//export cbwConfigure
func cbwConfigure() {
	configure.Do(func() {
		s := newSender(os.Getenv, func(line string) { fmt.Fprintln(os.Stderr, line) })
		if s == nil {
			C.cbw_enable(0)
			return
		}
		C.cbw_enable(1)
		me, _ := os.Hostname()
		warn := func(line string) { fmt.Fprintln(os.Stderr, line) }
		t := &taker{s: s, clock: hostclock.ID() + "/monotonic", host: me, aligners: map[int]*watch.Aligner{}, buf: make([]C.cbw_done, C.CBW_SLOTS),
			nv: newNVLinks(os.Getenv, warn)}
		running.Store(t)
		go t.loop()
	})
}

// cbwFinalize runs when NCCL finalizes a communicator: what has finished
// is taken and sent now, waiting about a second at most for a collector
// that is slow (none for one that is gone), so that a job that ends right
// after loses none of its last operations.
//
//export cbwFinalize
func cbwFinalize() {
	if t := running.Load(); t != nil {
		t.take()
		t.s.Flush()
	}
}

// newSender is the sender to the collector getenv names, or nil
// (watch.SenderFromEnv). The summaries' times are on CLOCK_MONOTONIC
// (plugin.c): the sender measures that clock's offset from the
// collector's.
func newSender(getenv func(string) string, warn func(string)) *watch.Sender {
	me, _ := os.Hostname()
	return watch.SenderFromEnv(getenv, "collbench watch plugin", watch.SenderOptions{Host: me, PID: os.Getpid(), Warn: warn,
		Library: library(), Now: func() int64 { return int64(C.cbw_now()) }})
}

// library names the NCCL this process runs and the profiler interface it
// initialised the plugin with (library.c).
func library() string {
	buf := make([]byte, C.CBW_PATH+128)
	C.cbw_library((*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

// taker takes finished operations from every communicator's ring, places
// their kernels on the host's clock and queues their summaries: every
// pollEvery (loop), and when a communicator is finalized.
type taker struct {
	s           *watch.Sender
	clock, host string
	mu          sync.Mutex // one take at a time: a slot is taken once
	aligners    map[int]*watch.Aligner
	buf         []C.cbw_done
	nv          *nvlinks
}

// loop takes every pollEvery, forever.
func (t *taker) loop() {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for range tick.C {
		t.take()
	}
}

// take queues the summaries of the operations finished now.
func (t *taker) take() {
	t.mu.Lock()
	defer t.mu.Unlock()
	older := int64(C.cbw_now()) - giveUp.Nanoseconds()
	for i := range int(C.cbw_contexts()) {
		var info C.cbw_info
		if C.cbw_context(C.int(i), &info) != 0 {
			continue
		}
		a := t.aligners[i]
		if a == nil {
			a = &watch.Aligner{}
			t.aligners[i] = a
		}
		n := int(C.cbw_take(C.int(i), C.int64_t(older), &t.buf[0], C.int(len(t.buf))))
		for _, d := range t.buf[:n] {
			op := watch.KernelOp{Seq: uint64(d.seq), IssueNS: int64(d.issue), GPUStart: int64(d.gpu_start),
				GPUStop: int64(d.gpu_stop), SeenMinusGPU: int64(d.seen_minus_gpu)}
			start, end, errNS, ok := a.Place(op)
			if !ok {
				continue
			}
			t.s.Send(watch.Summary{Comm: uint64(info.hash), Seq: op.Seq, Ranks: int(info.ranks), Rank: int(info.rank),
				Host: t.host, GPU: C.GoString(&info.bus[0]), Func: C.GoString(&d._func[0]), DType: C.GoString(&d.dtype[0]), Count: int64(d.count), IssueNS: op.IssueNS, StartNS: start, EndNS: end, ErrNS: errNS, Kernel: true, Clock: t.clock,
				Links: links(d), NVLink: t.nv.take(C.GoString(&info.bus[0]))})
		}
	}
}

// links are an operation's network sends by peer, its channels' summed:
// what the rank sent each peer, and the time its steps spent on the wire.
func links(d C.cbw_done) []watch.Link {
	var out []watch.Link
	for _, snd := range d.sent[:int(d.nsent)] {
		if snd.bytes <= 0 || snd.wire_ns <= 0 {
			continue
		}
		peer := int(snd.peer)
		i := slices.IndexFunc(out, func(l watch.Link) bool { return l.Peer == peer })
		if i < 0 {
			out = append(out, watch.Link{Peer: peer})
			i = len(out) - 1
		}
		out[i].Bytes += int64(snd.bytes)
		out[i].WireNS += int64(snd.wire_ns)
	}
	return out
}

// enabled says whether the NCCL side records: 1 yes, 0 no, -1 not
// configured yet.
func enabled() int { return int(C.cbw_enabled()) }

func main() {}
