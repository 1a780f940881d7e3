package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// read delivers one peer's frames and turns a lost connection into a fault
// of the world.
func (t *TCP) read(p *peer) {
	r := bufio.NewReader(p.conn)
	for {
		typ, payload, err := readFrame(r, maxFrame)
		if err != nil {
			select {
			case <-t.closing:
				// Leaving: a disconnect is expected, but still wakes a
				// caller waiting in the final barrier.
				t.lostOnce.Do(func() { t.lostErr <- fmt.Errorf("rank %d left", p.rank) })
				return
			default:
			}
			t.lost(&PeerError{Kind: FaultDisconnected, Rank: p.rank, Host: t.hostOf(p.rank),
				Msg: fmt.Sprintf("%s disconnected: it exited, was killed, or its host failed", t.who(p.rank))})
			return
		}
		t.seen[p.rank].Store(time.Now().UnixNano())
		switch typ {
		case frameData:
			p.q.push(payload)
		case frameBeat:
			if p != t.up {
				t.takeStatus(payload)
			}
		case frameJoined:
			if p == t.up {
				continue
			}
			if t.rank == 0 {
				t.joined(decodeRanks(payload))
			} else {
				t.sendUp(frameJoined, payload)
			}
		case frameWorld:
			if p == t.up {
				select {
				case t.worldCh <- payload:
				default:
				}
			}
		case frameNotice:
			t.noticeFrom(string(payload), p.rank)
		case frameAbort:
			var pe PeerError
			if json.Unmarshal(payload, &pe) != nil || pe.Msg == "" {
				pe = PeerError{Kind: FaultFailed, Rank: p.rank, Msg: string(payload)}
			}
			t.lostFrom(&pe, p.rank)
			return
		}
	}
}

// beat sends heartbeats and names a process that went silent: each
// process watches its parent and its children.
func (t *TCP) beat() {
	tick := time.NewTicker(t.beatEvery)
	defer tick.Stop()
	// A machine so loaded that this process itself runs late must not read
	// as a silent peer: the time this loop could not run is added to the
	// bound (lag, the longest stall of this loop within the last silence
	// period), and a peer on this machine that is alive and not stopped
	// gets up to two more silence periods (extended) before it is named.
	last := time.Now()
	var lag time.Duration
	var lagAt time.Time
	extended := map[int]bool{}
	var sending atomic.Bool
	for {
		select {
		case <-t.stopBeat:
			return
		case <-tick.C:
		}
		if now := time.Now(); now.Sub(last) > 2*t.beatEvery {
			lag, lagAt = max(lag, now.Sub(last)-t.beatEvery), now
		} else if now.Sub(lagAt) > t.silence {
			lag = 0
		}
		last = time.Now()
		var own []byte
		if f, ok := t.status.Load().(func() []byte); ok && f != nil {
			own = f()
		}
		links := t.links()
		if time.Now().UnixNano() >= t.quietUntil.Load() {
			// The beat's own path first: it never waits for the control
			// connection. The progress the beat carries goes over the
			// control connection, in the background, one round at a time.
			t.beats.send()
			if sending.CompareAndSwap(false, true) {
				go func() {
					defer sending.Store(false)
					for _, p := range links {
						// Up the tree the beat carries the progress of this
						// subtree; down it only says this process lives. A
						// failed write shows up as a lost connection or silence.
						var payload []byte
						if p == t.up {
							payload = t.bundle(own)
						}
						_ = p.send(frameBeat, payload, t.silence)
					}
				}()
			}
		}
		now := time.Now()
		for _, p := range links {
			quiet := now.Sub(time.Unix(0, t.seen[p.rank].Load()))
			// A peer never heard on the beat path (a firewall drops its
			// datagrams) is heard only through the control connection,
			// where a beat may wait behind a control message: it gets
			// three bounds.
			silence := t.silence
			if !t.beats.heardFrom(p.rank) {
				silence = 3 * t.silence
			}
			if quiet > silence+lag {
				select {
				case <-t.closing:
					return
				default:
				}
				if !silentPast(quiet, silence, lag, t.runsHere(p.rank)) {
					if !extended[p.rank] {
						extended[p.rank] = true
						if t.loadNote != nil {
							t.loadNote(p.rank, quiet)
						}
					}
					continue
				}
				t.lost(&PeerError{Kind: FaultSilent, Rank: p.rank, Host: t.hostOf(p.rank),
					Msg: fmt.Sprintf("%s stopped answering: not heard from for %v (stopped, frozen or cut off from the network)",
						t.who(p.rank), quiet.Round(time.Second))})
				return
			}
		}
	}
}

// silentPast decides whether a peer unheard for quiet is named silent:
// past the bound plus this process's own recent stall (lag), and, for a
// peer that runs on this machine, alive and not stopped, past three bounds.
func silentPast(quiet, silence, lag time.Duration, runsHere bool) bool {
	if runsHere {
		return quiet > 3*silence+lag
	}
	return quiet > silence+lag
}

// runsHere says whether rank r's process is a collbench on this machine
// that is alive and not stopped: silent because the machine is loaded, not
// because it stopped or died.
func (t *TCP) runsHere(r int) bool {
	if r < 0 || r >= len(t.pids) || t.pids[r] <= 0 {
		return false
	}
	pid := t.pids[r]
	mine, err1 := os.Executable()
	theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err1 != nil || err2 != nil || filepath.Clean(mine) != filepath.Clean(theirs) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: T and t are
	// stopped, Z and X dead.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	switch stat[i+2] {
	case 'R', 'S', 'D':
		return true
	}
	return false
}

// OnLoadedPeer sets a function told once per rank when a rank on this
// machine was silent past the bound but alive and running, so its naming
// was put off (the machine is loaded).
func (t *TCP) OnLoadedPeer(f func(rank int, quiet time.Duration)) { t.loadNote = f }

// SetStatus sets what this process's heartbeats carry (its progress).
func (t *TCP) SetStatus(f func() []byte) { t.status.Store(f) }

// PeerStatus returns, on rank 0, the last progress rank r reported (its
// heartbeats carry it up the tree) and when rank r was last heard from.
func (t *TCP) PeerStatus(r int) ([]byte, time.Time) {
	t.statusMu.Lock()
	defer t.statusMu.Unlock()
	return t.peerStatus[r], time.Unix(0, max(t.seen[r].Load(), t.statusAt[r].Load()))
}

// lost records the first fault, tells every other process and calls the
// handler.
func (t *TCP) lost(err error) { t.lostFrom(err, -1) }

// lostFrom records the first fault and floods it through the tree: to the
// parent and every child but the link it came from (from) and a rank that
// is gone. The subtree behind a gone rank hears of it from its own
// watchers of that rank.
func (t *TCP) lostFrom(err error, from int) {
	t.lostOnce.Do(func() {
		pe := asPeerError(err)
		// Tell the others before waking this process's own callers, which
		// may exit at once; a stopped peer must not hold this up.
		if pe != nil {
			b, _ := json.Marshal(pe)
			t.linkMu.Lock()
			t.lostMsg = b
			t.linkMu.Unlock()
			close(t.lostCh)
			var wg sync.WaitGroup
			gone := pe.Kind == FaultDisconnected || pe.Kind == FaultSilent
			for _, p := range t.links() {
				// A hung rank is told too, so it stops; a gone one cannot be.
				if p.rank != from && (!gone || p.rank != pe.Rank) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_ = p.send(frameAbort, b, 2*time.Second)
					}()
				}
			}
			wg.Wait()
		}
		t.lostErr <- err
		t.mu.Lock()
		h := t.onLost
		t.mu.Unlock()
		if h != nil {
			h(err)
		}
	})
}

func asPeerError(err error) *PeerError {
	var pe *PeerError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// Abort reports a fault to every process of the world: a *PeerError (a
// verdict about another rank) travels as it is; any other error is this
// process's own failure.
func (t *TCP) Abort(cause error) {
	pe := asPeerError(cause)
	if pe == nil {
		kind := FaultFailed
		if errors.Is(cause, context.Canceled) {
			kind = FaultInterrupted
		}
		host := t.hostOf(t.rank)
		pe = &PeerError{Kind: kind, Rank: t.rank, Host: host, Msg: fmt.Sprintf("rank %d (%s) failed: %v", t.rank, host, cause)}
		if kind == FaultInterrupted {
			pe.Msg = fmt.Sprintf("rank %d (%s) was interrupted", t.rank, host)
		}
	}
	t.lost(pe)
}

// OnPeerLost sets the function called once when a process of the world
// disconnects, goes silent, or a fault is reported.
func (t *TCP) OnPeerLost(f func(error)) {
	t.mu.Lock()
	t.onLost = f
	t.mu.Unlock()
}
