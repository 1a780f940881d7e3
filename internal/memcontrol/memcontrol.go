// Package memcontrol joins goroutines of one test as if each were a
// process of a world: a measure.Control whose small messages meet in
// memory. Tests of distributed worlds use it; collbench itself does not.
package memcontrol

import (
	"errors"
	"sync"
	"time"

	"collbench/internal/syncx"
)

// Control is one member's end.
type Control struct {
	hub  *hub
	rank int
}

type hub struct {
	n     int
	hosts []string
	bar   *syncx.Barrier
	mu    sync.Mutex
	slots [][]byte
	// release delays each member's return from AllGather, as a tree over
	// a network releases its leaves after its root (nil: none).
	release func(rank int) time.Duration
}

// New joins n members; hosts names each member's host ("h" for all when
// nil).
func New(n int, hosts []string) []*Control {
	if hosts == nil {
		hosts = make([]string, n)
		for i := range hosts {
			hosts[i] = "h"
		}
	}
	h := &hub{n: n, hosts: hosts, bar: syncx.NewBarrier(n), slots: make([][]byte, n)}
	out := make([]*Control, n)
	for r := range out {
		out[r] = &Control{hub: h, rank: r}
	}
	return out
}

// Stagger makes AllGather return to each member of ctls (one New's) after
// delay(rank), as a barrier over a network lets its processes go one
// network delay apart.
func Stagger(ctls []*Control, delay func(rank int) time.Duration) {
	if len(ctls) > 0 {
		ctls[0].hub.release = delay
	}
}

// Rank is the member's place.
func (c *Control) Rank() int { return c.rank }

// Size is how many members there are.
func (c *Control) Size() int { return c.hub.n }

// Hosts names each member's host.
func (c *Control) Hosts() []string { return c.hub.hosts }

// LocalIP is the loopback address every member listens on.
func (c *Control) LocalIP() string { return "127.0.0.1" }

// Abort releases every member waiting in a call.
func (c *Control) Abort(error) { c.hub.bar.Abort(errors.New("aborted")) }

// Close waits for every member to close.
func (c *Control) Close() error { return c.hub.bar.Wait() }

// AllGather returns every member's data, by rank.
func (c *Control) AllGather(data []byte) ([][]byte, error) {
	c.hub.mu.Lock()
	c.hub.slots[c.rank] = append([]byte(nil), data...)
	c.hub.mu.Unlock()
	if err := c.hub.bar.Wait(); err != nil {
		return nil, err
	}
	c.hub.mu.Lock()
	out := append([][]byte(nil), c.hub.slots...)
	c.hub.mu.Unlock()
	err := c.hub.bar.Wait()
	if c.hub.release != nil {
		time.Sleep(c.hub.release(c.rank))
	}
	return out, err
}

// Gather returns every member's data on rank 0, nil on the others.
func (c *Control) Gather(data []byte) ([][]byte, error) {
	all, err := c.AllGather(data)
	if c.rank != 0 {
		return nil, err
	}
	return all, err
}
