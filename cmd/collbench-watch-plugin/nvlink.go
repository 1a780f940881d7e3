package main

/*
#include <stdlib.h>
#include "watchplugin.h"
*/
import "C"

import (
	"os"
	"sync"
	"time"
	"unsafe"

	"collbench/watch"
)

// nvlinks reads each GPU's NVLink counters every so often, beside the
// bound of what the process's communicators on that GPU put on its links,
// and holds the newest reading until a summary of that GPU carries it to
// the collector (cumulative counts: a reading that is replaced or lost
// costs the judge nothing but resolution). It reads on a goroutine of its
// own, never under the taker's lock: an NVML call that does not return
// stops the readings, not the summaries or NCCL's finalize.
type nvlinks struct {
	every  time.Duration // 0: not read
	opened bool
	gpu    map[string]int    // NVML's GPU by bus id (-1: not readable)
	why    map[string]string // why a GPU is not readable, until a summary says it
	infos  []C.cbw_info
	mu     sync.Mutex
	// pending (under mu) is each GPU's newest reading, by bus id.
	pending map[string]*watch.NVLinkSample
}

// newNVLinks reads every the environment's period (watch.EnvNVLinkEvery),
// warning once where it is malformed, and starts reading.
func newNVLinks(getenv func(string) string, warn func(string)) *nvlinks {
	every, err := watch.NVLinkEveryFromEnv(getenv)
	if err != nil {
		warn("collbench watch plugin: " + err.Error())
	}
	n := &nvlinks{every: every, gpu: map[string]int{}, why: map[string]string{}, pending: map[string]*watch.NVLinkSample{}}
	if every > 0 {
		go n.loop()
	}
	return n
}

// loop reads every period, until NVML cannot be opened.
func (n *nvlinks) loop() {
	tick := time.NewTicker(n.every)
	defer tick.Stop()
	for range tick.C {
		n.infos = n.infos[:0]
		for i := range int(C.cbw_contexts()) {
			var in C.cbw_info
			if C.cbw_context(C.int(i), &in) == 0 {
				n.infos = append(n.infos, in)
			}
		}
		if !n.read(n.infos) {
			return
		}
	}
}

// read takes a reading of each GPU in infos: the GPU's counters and the
// sum of its communicators' bounds (a communicator across hosts marks the
// reading: part of its bytes go through NICs instead). It says false once
// NVML cannot be opened.
func (n *nvlinks) read(infos []C.cbw_info) bool {
	if !n.opened {
		n.opened = true
		var why [160]C.char
		path := C.CString(os.Getenv(watch.EnvNVML))
		ok := C.cbw_nvml_open(path, &why[0], C.int(len(why))) == 0
		C.free(unsafe.Pointer(path))
		if !ok {
			for _, in := range infos {
				n.why[C.GoString(&in.bus[0])] = C.GoString(&why[0])
			}
			n.markUnread()
			return false
		}
	}
	at := int64(C.cbw_now())
	sums := map[string]*watch.NVLinkSample{}
	for _, in := range infos {
		bus := C.GoString(&in.bus[0])
		if bus == "" {
			continue
		}
		s := sums[bus]
		if s == nil {
			s = &watch.NVLinkSample{PID: os.Getpid(), AtNS: at}
			sums[bus] = s
		}
		s.JobTX += int64(in.wire_tx)
		s.JobRX += int64(in.wire_rx)
		s.Spans = s.Spans || in.nodes > 1
	}
	for bus, s := range sums {
		g, known := n.gpu[bus]
		if !known {
			var why [160]C.char
			cbus := C.CString(bus)
			g = int(C.cbw_nvlink_gpu(cbus, &why[0], C.int(len(why))))
			C.free(unsafe.Pointer(cbus))
			n.gpu[bus] = g
			if g < 0 {
				n.why[bus] = C.GoString(&why[0])
			}
		}
		var tx, rx C.int64_t
		if g < 0 || C.cbw_nvlink_read(C.int(g), &tx, &rx) != 0 {
			continue
		}
		s.TX, s.RX, s.Read = int64(tx), int64(rx), true
		n.mu.Lock()
		n.pending[bus] = s
		n.mu.Unlock()
	}
	n.markUnread()
	return true
}

// markUnread queues, once per GPU, a reading that says why it is not read.
func (n *nvlinks) markUnread() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for bus, why := range n.why {
		if why != "" {
			n.pending[bus] = &watch.NVLinkSample{PID: os.Getpid(), Unread: why}
			n.why[bus] = ""
		}
	}
}

// take is the reading a summary of the GPU on bus carries now, if any.
func (n *nvlinks) take(bus string) *watch.NVLinkSample {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.pending[bus]
	if s != nil {
		delete(n.pending, bus)
	}
	return s
}
