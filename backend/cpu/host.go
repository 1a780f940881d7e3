package cpu

import (
	"sync"

	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// Host is one rank's host memory as this backend keeps it, for other
// backends that run on host memory (mpi): buffers mapped outside Go's heap
// (so C libraries may be handed them), fills, poisons and checks in steps
// that look at an abort between them, and the process's memory budget.
type Host struct {
	r *rank
}

// NewHost returns host memory for world rank me (hosts: each world rank's
// host) under limit bytes (0: a share of what the host has, see
// processLimit).
func NewHost(me int, hosts []string, limit int64, track *watchdog.Tracker) *Host {
	w := &world{mem: processMemory(me, hosts, limit), stop: make(chan struct{}), stopOnce: new(sync.Once), all: &hubList{}}
	return &Host{r: &rank{w: w, worldRank: me, track: track}}
}

// processMemory is the memory account of world rank me's process, one of
// the collbench processes on its host: limit bytes if given, or else three
// quarters of what the system reports available, shared by the processes
// of that host.
func processMemory(me int, hosts []string, limit int64) *memory {
	sharers := 0
	for _, h := range hosts {
		if h == hosts[me] {
			sharers++
		}
	}
	set := limit > 0
	if !set {
		limit = memAvailable() * 3 / 4 / int64(max(sharers, 1))
	}
	return &memory{limit: limit, shared: sharers, set: set}
}

// Abort stops every loop over this memory and makes Stopped say why.
func (h *Host) Abort(cause error) { h.r.w.Abort(cause) }

// Done is closed once Abort has been called.
func (h *Host) Done() <-chan struct{} { return h.r.w.stop }

// Stopped is the abort's error, or nil.
func (h *Host) Stopped() error { return h.r.w.stopped() }

// Budget is what the rank may still allocate, and how the limit came about.
func (h *Host) Budget() (int64, string) { return h.r.w.mem.budget(1) }

// Used is the memory the rank has allocated.
func (h *Host) Used() int64 {
	h.r.w.mem.mu.Lock()
	defer h.r.w.mem.mu.Unlock()
	return h.r.w.mem.used
}

// Alloc maps n bytes.
func (h *Host) Alloc(n int64) (measure.Buffer, error) { return h.r.Alloc(n) }

// Free unmaps a buffer of Alloc.
func (h *Host) Free(b measure.Buffer) error { return h.r.Free(b) }

// Fill writes count elements of p at dst.
func (h *Host) Fill(dst measure.View, count int64, p measure.Pattern) error {
	return h.r.Fill(dst, count, p)
}

// Poison overwrites count elements of t at dst with a value no pattern has.
func (h *Host) Poison(dst measure.View, count int64, t dtype.DType) error {
	return h.r.Poison(dst, count, t)
}

// Check counts the wrong elements of e's output at src.
func (h *Host) Check(src measure.View, e measure.Expectation) (int64, error) {
	return h.r.Check(src, e)
}

// FindMismatches lists up to limit wrong elements of e's output at src.
func (h *Host) FindMismatches(src measure.View, e measure.Expectation, limit int) ([]results.Mismatch, error) {
	return h.r.FindMismatches(src, e, limit)
}

// ReadHost copies bytes at src.
func (h *Host) ReadHost(src measure.View, bytes int64) ([]byte, error) {
	return h.r.ReadHost(src, bytes)
}

// Bytes is the memory of bytes bytes at v, a view of a buffer of Alloc.
func Bytes(v measure.View, bytes int64) ([]byte, error) { return span(v, bytes) }
