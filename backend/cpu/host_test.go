package cpu

import (
	"errors"
	"testing"

	"collbench/dtype"
	"collbench/measure"
	"collbench/watchdog"
)

// TestHost checks the host memory other backends borrow: a filled buffer
// passes a check of a one-rank broadcast, a poisoned one fails every
// element, the budget counts the buffer, and an abort stops the loops
// (and says why) while Bytes refuses a view past the buffer.
func TestHost(t *testing.T) {
	h := NewHost(0, []string{"h"}, 1<<20, watchdog.NewBoard().For(0))
	const n = 1024
	b, err := h.Alloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Used(); got != n*4 {
		t.Fatalf("used %d bytes, want %d", got, n*4)
	}
	if free, _ := h.Budget(); free != 1<<20-n*4 {
		t.Fatalf("budget %d, want %d", free, 1<<20-n*4)
	}
	c, ty := measure.Broadcast, dtype.Float32
	dom := measure.DomainFor(c, ty, measure.NoOp, 1)
	p := measure.Pattern{DType: ty, Domain: dom, Seed: 7, Rank: 0, Ranks: 1}
	v := measure.View{Buf: b}
	if err := h.Fill(v, n, p); err != nil {
		t.Fatal(err)
	}
	e := measure.Expectation{Coll: c, DType: ty, Op: measure.NoOp, Ranks: 1, Geom: measure.Geometry{Count: n, SendCount: n, RecvCount: n}, Domain: dom, Seed: 7}
	if wrong, err := h.Check(v, e); err != nil || wrong != 0 {
		t.Fatalf("check after fill: %d wrong, %v", wrong, err)
	}
	if err := h.Poison(v, n, ty); err != nil {
		t.Fatal(err)
	}
	if wrong, _ := h.Check(v, e); wrong != n {
		t.Fatalf("check after poison: %d wrong, want %d", wrong, n)
	}
	if ms, err := h.FindMismatches(v, e, 3); err != nil || len(ms) != 3 {
		t.Fatalf("mismatches: %v, %v", ms, err)
	}
	if raw, err := h.ReadHost(v, 8); err != nil || len(raw) != 8 {
		t.Fatalf("read: %v, %v", raw, err)
	}
	if _, err := Bytes(measure.View{Buf: b, Off: 4}, n*4); err == nil {
		t.Fatal("Bytes took a view past the buffer")
	}
	cause := errors.New("planted")
	h.Abort(cause)
	<-h.Done()
	if err := h.Fill(v, n, p); err == nil || h.Stopped() == nil {
		t.Fatalf("fill after abort: %v", err)
	}
	if err := h.Free(b); err != nil || h.Used() != 0 {
		t.Fatalf("free: %v, %d used", err, h.Used())
	}
}

// TestProcessMemoryShare: without a limit, a process's share of the host's
// memory is divided among the processes of its own host only.
func TestProcessMemoryShare(t *testing.T) {
	hosts := []string{"a", "b", "a", "a"}
	onA, onB := processMemory(2, hosts, 0), processMemory(1, hosts, 0)
	if onA.shared != 3 || onB.shared != 1 || onA.set || onB.set {
		t.Fatalf("sharers a %d (set %v), b %d (set %v); want 3 and 1, not set", onA.shared, onA.set, onB.shared, onB.set)
	}
	if onA.limit <= 0 || onB.limit < 2*onA.limit {
		t.Errorf("limits: a %d, b %d; b alone on its host should get about three times a's", onA.limit, onB.limit)
	}
	if m := processMemory(0, hosts, 1<<20); !m.set || m.limit != 1<<20 {
		t.Errorf("a given limit: %+v", m)
	}
}
