package cpu

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"collbench/internal/faults"
	"collbench/internal/secret"
	"collbench/watchdog"
)

// The data plane: every process listens on one port and connects directly
// to the peers its algorithms need, once, on first use. Connections are
// authenticated with a per-world key (shared over the authenticated
// control connection) and carry frames of at most pieceSize payload bytes,
// each tagged with its communicator and operation, so ranks that disagree
// on what they run are caught instead of mixing data.

const (
	// pieceSize is the largest payload of one frame; a rank keeps one or two
	// pieces of scratch, whatever the message size.
	pieceSize = 512 << 10
	// frameHeader is the size of a frame's header: tag (8), length (4), spare (4).
	frameHeader = 16
	// socketBuffer is asked for on every data connection: enough for two
	// frames, so a write of one piece never waits for the peer to read.
	socketBuffer = 4 << 20
	// linkTimeout bounds connecting to a peer and its handshake.
	linkTimeout = 60 * time.Second
	// livenessEvery is how often a rank waiting for a peer to connect
	// looks whether the peer is still there.
	livenessEvery = time.Second
)

// LinkError is a failure of the data connection to a peer.
type LinkError struct {
	Peer int
	Host string
	Err  error
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("data link to rank %d (%s) failed: %v", e.Peer, e.Host, e.Err)
}

func (e *LinkError) Unwrap() error { return e.Err }

// mesh is one process's data connections to the other processes.
type mesh struct {
	me     int
	hosts  []string
	addrs  []string
	key    []byte
	ln     net.Listener
	faults *faults.Set
	track  *watchdog.Tracker

	mu    sync.Mutex
	links map[int]*link
	ready map[int]chan struct{} // closed when the link to a peer exists

	aborted   chan struct{}
	abortOnce sync.Once
	abortErr  error

	sent, recvd atomic.Int64

	// force is the algorithm forced per collective (force.go).
	force forced
}

type link struct {
	m     *mesh
	peer  int
	c     net.Conn
	r     *bufio.Reader
	hdr   [frameHeader]byte
	whdr  [frameHeader]byte
	flip  [1]byte
	pace  faults.Throttle
	delay time.Duration
	// wireBytes and wireNS count what this rank sent the peer and the time
	// its sends took, planted delays and rates included (collbench watch's
	// links).
	wireBytes, wireNS atomic.Int64
}

func newMesh(me int, hosts []string, ln net.Listener, addrs []string, key []byte, fs *faults.Set, track *watchdog.Tracker) *mesh {
	m := &mesh{me: me, hosts: hosts, addrs: addrs, key: key, ln: ln, faults: fs, track: track,
		links: map[int]*link{}, ready: map[int]chan struct{}{}, aborted: make(chan struct{})}
	go m.accept()
	return m
}

// abort closes every connection, so any rank blocked on one returns err.
func (m *mesh) abort(err error) {
	m.abortOnce.Do(func() {
		m.abortErr = err
		close(m.aborted)
		m.ln.Close()
		m.mu.Lock()
		for _, l := range m.links {
			l.c.Close()
		}
		m.mu.Unlock()
	})
}

func (m *mesh) abortedErr() error {
	select {
	case <-m.aborted:
		return m.abortErr
	default:
		return nil
	}
}

func (m *mesh) host(r int) string {
	if r >= 0 && r < len(m.hosts) {
		return m.hosts[r]
	}
	return "?"
}

func (m *mesh) readyChan(peer int) chan struct{} {
	ch, ok := m.ready[peer]
	if !ok {
		ch = make(chan struct{})
		m.ready[peer] = ch
	}
	return ch
}

// register adds an authenticated connection to peer; a second one is refused.
func (m *mesh) register(peer int, c net.Conn) bool {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetWriteBuffer(socketBuffer)
		_ = tc.SetReadBuffer(socketBuffer)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.links[peer]; dup || m.abortedErr() != nil {
		return false
	}
	l := &link{m: m, peer: peer, c: c, r: bufio.NewReaderSize(c, 64<<10), delay: m.faults.Delay(m.me, peer)}
	l.pace.Rate = m.faults.SendRate(m.me, peer, m.host)
	m.links[peer] = l
	close(m.readyChan(peer))
	return true
}

// accept admits connections from peers that prove the world's key.
func (m *mesh) accept() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			nonce := secret.Nonce()
			if _, err := c.Write(nonce); err != nil {
				c.Close()
				return
			}
			var hello [16 + 32]byte
			if _, err := io.ReadFull(c, hello[:]); err != nil {
				c.Close()
				return
			}
			from := int(binary.LittleEndian.Uint64(hello[0:])) //nolint:gosec // G115: ranks are small and checked before use; lengths are bounded by the frame limit
			to := int(binary.LittleEndian.Uint64(hello[8:]))   //nolint:gosec // G115: ranks are small and checked before use; lengths are bounded by the frame limit
			if to != m.me || from < 0 || from >= len(m.addrs) || from == m.me ||
				!secret.Verify(m.key, hello[16:], "collbench/data", nonce, from, to) {
				c.Close()
				return
			}
			if _, err := c.Write([]byte{1}); err != nil || !m.register(from, c) {
				c.Close()
				return
			}
			_ = c.SetDeadline(time.Time{})
		}()
	}
}

// wire is what this rank has sent each peer it has a link to, and the
// time its sends took, so far: by world rank, {bytes, ns}.
func (m *mesh) wire() map[int][2]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int][2]int64, len(m.links))
	for peer, l := range m.links {
		out[peer] = [2]int64{l.wireBytes.Load(), l.wireNS.Load()}
	}
	return out
}

// link returns the connection to peer, making it on first use: the lower
// rank dials, the higher one waits for it.
func (m *mesh) link(peer int) (*link, error) {
	m.mu.Lock()
	if l, ok := m.links[peer]; ok {
		m.mu.Unlock()
		return l, nil
	}
	ready := m.readyChan(peer)
	m.mu.Unlock()
	if m.me < peer {
		if err := m.dial(peer); err != nil {
			return nil, err
		}
	}
	m.track.Waiting(peer)
	// The higher rank waits for the lower one to dial. A peer that ended
	// (or gave up) before dialing never will: its port refuses
	// connections, which a look every livenessEvery tells long before
	// linkTimeout.
	limit := time.NewTimer(linkTimeout)
	defer limit.Stop()
	look := time.NewTicker(livenessEvery)
	defer look.Stop()
	for waiting := true; waiting; {
		select {
		case <-ready:
			waiting = false
		case <-m.aborted:
			return nil, m.abortErr
		case <-limit.C:
			return nil, &LinkError{Peer: peer, Host: m.host(peer), Err: fmt.Errorf("it did not connect within %v", linkTimeout)}
		case <-look.C:
			if m.me > peer && peerGone(m.addrs[peer]) {
				select {
				case <-ready: // it dialed after all
					waiting = false
				default:
					return nil, &LinkError{Peer: peer, Host: m.host(peer), Err: errors.New("it is gone before connecting: its data port refuses connections (the process ended or gave up)")}
				}
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.links[peer], nil
}

// peerGone reports whether a peer's data port refuses connections: its
// process has ended or closed its mesh. A port that does not answer in time
// (a slow or filtered network) is not taken for gone.
func peerGone(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, livenessEvery)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return false
}

func (m *mesh) dial(peer int) error {
	d := net.Dialer{Timeout: linkTimeout}
	c, err := d.Dial("tcp", m.addrs[peer])
	if err != nil {
		return &LinkError{Peer: peer, Host: m.host(peer), Err: err}
	}
	_ = c.SetDeadline(time.Now().Add(linkTimeout))
	nonce := make([]byte, secret.NonceSize)
	var ok [1]byte
	hello := make([]byte, 16, 16+32)
	binary.LittleEndian.PutUint64(hello[0:], uint64(m.me)) //nolint:gosec // G115: ranks are small and checked before use; lengths are bounded by the frame limit
	binary.LittleEndian.PutUint64(hello[8:], uint64(peer)) //nolint:gosec // G115: ranks are small and checked before use; lengths are bounded by the frame limit
	_, err = io.ReadFull(c, nonce)
	if err == nil {
		hello = append(hello, secret.Proof(m.key, "collbench/data", nonce, m.me, peer)...)
		_, err = c.Write(hello)
	}
	if err == nil {
		_, err = io.ReadFull(c, ok[:])
	}
	if err != nil {
		c.Close()
		return &LinkError{Peer: peer, Host: m.host(peer), Err: fmt.Errorf("handshake: %v", err)}
	}
	_ = c.SetDeadline(time.Time{})
	if !m.register(peer, c) {
		c.Close()
		if err := m.abortedErr(); err != nil {
			return err
		}
	}
	return nil
}

// fail turns a connection error into the abort cause, or a LinkError.
func (l *link) fail(err error) error {
	if a := l.m.abortedErr(); a != nil {
		return a
	}
	return &LinkError{Peer: l.peer, Host: l.m.host(l.peer), Err: err}
}

// sleep waits d unless the mesh is aborted.
func (m *mesh) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-m.aborted:
		return m.abortErr
	}
}

// send writes data as frames tagged tag, at most pieceSize bytes each.
func (l *link) send(tag uint64, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), pieceSize)
		if err := l.sendFrame(tag, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (l *link) sendFrame(tag uint64, p []byte) error {
	m := l.m
	t0 := time.Now()
	defer func() {
		l.wireBytes.Add(int64(frameHeader + len(p)))
		l.wireNS.Add(time.Since(t0).Nanoseconds())
	}()
	// A planted delay, then a planted rate: the frame reaches the peer
	// when a link of that rate would have carried it, so its receiver
	// waits for it as its sender does (not the sender alone, after).
	if err := m.sleep(l.delay + l.pace.Wait(frameHeader+len(p))); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(l.whdr[0:], tag)
	binary.LittleEndian.PutUint32(l.whdr[8:], uint32(len(p))) //nolint:gosec // G115: ranks are small and checked before use; lengths are bounded by the frame limit
	m.track.Waiting(l.peer)
	_, err := l.c.Write(l.whdr[:])
	if err == nil && len(p) > 0 {
		if m.faults.Corrupts(m.me) {
			// Flip the lowest bit of the first byte on the wire only.
			l.flip[0] = p[0] ^ 1
			if _, err = l.c.Write(l.flip[:]); err == nil {
				_, err = l.c.Write(p[1:])
			}
		} else {
			_, err = l.c.Write(p)
		}
	}
	m.track.Waiting(watchdog.NotWaiting)
	if err != nil {
		return l.fail(err)
	}
	m.sent.Add(int64(frameHeader + len(p)))
	return nil
}

// recvFrame reads the next frame, which must carry tag, into dst and
// returns its length; a frame longer than dst is an error.
func (l *link) recvFrame(tag uint64, dst []byte) (int, error) {
	m := l.m
	m.track.Waiting(l.peer)
	defer m.track.Waiting(watchdog.NotWaiting)
	if _, err := io.ReadFull(l.r, l.hdr[:]); err != nil {
		return 0, l.fail(err)
	}
	got := binary.LittleEndian.Uint64(l.hdr[0:])
	n := int(binary.LittleEndian.Uint32(l.hdr[8:]))
	if got != tag {
		return 0, l.fail(fmt.Errorf("it sent data of communicator %d operation %d where this rank runs communicator %d operation %d (the ranks disagree on what they run)",
			got>>32, uint32(got), tag>>32, uint32(tag))) //nolint:gosec // G115: ranks are small and checked before use; lengths are bounded by the frame limit
	}
	if n > len(dst) {
		return 0, l.fail(fmt.Errorf("it sent %d bytes where %d were due (the ranks disagree on the operation)", n, len(dst)))
	}
	if _, err := io.ReadFull(l.r, dst[:n]); err != nil {
		return 0, l.fail(err)
	}
	m.recvd.Add(int64(frameHeader + n))
	m.track.Moved()
	return n, nil
}

// recv reads frames tagged tag until dst is full.
func (l *link) recv(tag uint64, dst []byte) error {
	for len(dst) > 0 {
		n, err := l.recvFrame(tag, dst[:min(len(dst), pieceSize)])
		if err != nil {
			return err
		}
		if n == 0 {
			return l.fail(errors.New("it sent an empty frame where data was due"))
		}
		dst = dst[n:]
	}
	return nil
}
