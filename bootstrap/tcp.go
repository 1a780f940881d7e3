package bootstrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Frame types of the control protocol.
const (
	frameHello   = 1
	frameWelcome = 2
	frameError   = 3
	frameData    = 4
	frameAbort   = 5
)

// maxFrame bounds one control message (64 MiB).
const maxFrame = 64 << 20

// TCPOptions configure Join.
type TCPOptions struct {
	Rank, Size int
	// Addr is rank 0's address, host:port. Rank 0 listens on its port.
	Addr string
	// Host is this process's host identity (NCCL_HOSTID or the hostname).
	Host string
	// Args are compared at rendezvous: every rank must run the same command.
	Args []string
	// Timeout bounds the whole rendezvous.
	Timeout time.Duration
}

type hello struct {
	Rank int      `json:"rank"`
	Size int      `json:"size"`
	Host string   `json:"host"`
	Args []string `json:"args"`
}

type welcome struct {
	Hosts []string `json:"hosts"`
}

type peer struct {
	rank int
	conn net.Conn
	w    *bufio.Writer
	wmu  sync.Mutex
	data chan []byte
}

// TCP is a world of processes joined through rank 0 (a star): rank 0 holds a
// connection to every other rank and relays every message.
type TCP struct {
	rank, size int
	hosts      []string
	peers      []*peer // rank 0: index by rank (nil at 0); others: [0] is rank 0
	lostOnce   sync.Once
	lostErr    chan error
	closing    chan struct{}
	closeOnce  sync.Once
	onLost     func(error)
	mu         sync.Mutex
}

func writeFrame(p *peer, typ byte, payload []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	var hdr [5]byte
	hdr[0] = typ
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := p.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := p.w.Write(payload); err != nil {
		return err
	}
	return p.w.Flush()
}

func readFrame(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("control message of %d bytes is too large", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return hdr[0], buf, nil
}

func newPeer(rank int, c net.Conn) *peer {
	return &peer{rank: rank, conn: c, w: bufio.NewWriter(c), data: make(chan []byte, 4)}
}

// Join forms the world: rank 0 serves the rendezvous at the port of Addr and
// waits for every other rank; the others connect, retrying until the
// timeout. Rank 0 checks every rank's world size and arguments. An error
// names the ranks that never arrived, or the rank whose arguments differ.
func Join(ctx context.Context, o TCPOptions) (*TCP, error) {
	if o.Size < 2 {
		return nil, fmt.Errorf("a world of %d processes needs no rendezvous", o.Size)
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	t := &TCP{rank: o.Rank, size: o.Size, lostErr: make(chan error, 1), closing: make(chan struct{})}
	var err error
	if o.Rank == 0 {
		err = t.serve(ctx, o)
	} else {
		err = t.connect(ctx, o)
	}
	if err != nil {
		t.closeConns()
		return nil, err
	}
	for _, p := range t.peers {
		if p != nil {
			go t.read(p)
		}
	}
	return t, nil
}

func listenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("invalid rendezvous address %q (want host:port): %v", addr, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return net.JoinHostPort(host, port), nil
	}
	return ":" + port, nil
}

func (t *TCP) serve(ctx context.Context, o TCPOptions) error {
	la, err := listenAddr(o.Addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", la)
	if err != nil {
		return fmt.Errorf("rank 0 cannot serve the rendezvous on %s: %v", la, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(o.Timeout)
	t.peers = make([]*peer, o.Size)
	t.hosts = make([]string, o.Size)
	t.hosts[0] = o.Host
	arrived := 1
	fail := func(msg string) error {
		answered := 0
		for _, p := range t.peers {
			if p != nil {
				_ = writeFrame(p, frameError, []byte(msg))
				closeGently(p.conn)
				answered++
			}
		}
		// Ranks still on their way get the same explanation instead of a
		// refused or reset connection (not after a timeout: they are not coming).
		grace := time.Now().Add(5 * time.Second)
		if deadline.Before(grace) {
			grace = deadline
		}
		for answered < o.Size-1 && time.Now().Before(grace) {
			_ = ln.(*net.TCPListener).SetDeadline(grace)
			c, err := ln.Accept()
			if err != nil {
				break
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if typ, _, err := readFrame(c); err == nil && typ == frameHello {
				_ = writeFrame(newPeer(-1, c), frameError, []byte(msg))
				answered++
			}
			closeGently(c)
		}
		return errors.New(msg)
	}
	for arrived < o.Size {
		if err := ctx.Err(); err != nil {
			return fail("rendezvous interrupted on rank 0")
		}
		wake := time.Now().Add(500 * time.Millisecond)
		if deadline.Before(wake) {
			wake = deadline
		}
		_ = ln.(*net.TCPListener).SetDeadline(wake)
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && time.Now().Before(deadline) {
				continue
			}
			return fail(fmt.Sprintf("rendezvous at %s timed out after %v: %s never arrived", o.Addr, o.Timeout, missingRanks(t.peers)))
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, payload, err := readFrame(c)
		_ = c.SetReadDeadline(time.Time{})
		var h hello
		if err != nil || typ != frameHello || json.Unmarshal(payload, &h) != nil {
			c.Close() // not a collbench rank (a port scan, a stale process)
			continue
		}
		p := newPeer(h.Rank, c)
		switch {
		case h.Size != o.Size:
			_ = writeFrame(p, frameError, nil)
			c.Close()
			return fail(fmt.Sprintf("rank %d (%s) was started for a world of %d ranks, rank 0 for %d", h.Rank, h.Host, h.Size, o.Size))
		case h.Rank <= 0 || h.Rank >= o.Size:
			c.Close()
			return fail(fmt.Sprintf("a process on %s says it is rank %d, outside the world of %d", h.Host, h.Rank, o.Size))
		case t.peers[h.Rank] != nil:
			c.Close()
			return fail(fmt.Sprintf("two processes say they are rank %d (on %s and %s)", h.Rank, t.hosts[h.Rank], h.Host))
		case !reflect.DeepEqual(h.Args, o.Args):
			t.peers[h.Rank] = p
			return fail(fmt.Sprintf("rank %d (%s) was started with different arguments: %q; rank 0 has %q",
				h.Rank, h.Host, strings.Join(h.Args, " "), strings.Join(o.Args, " ")))
		}
		t.peers[h.Rank] = p
		t.hosts[h.Rank] = h.Host
		arrived++
	}
	w, _ := json.Marshal(welcome{Hosts: t.hosts})
	for _, p := range t.peers[1:] {
		if err := writeFrame(p, frameWelcome, w); err != nil {
			return fail(fmt.Sprintf("rank %d disconnected during the rendezvous", p.rank))
		}
	}
	return nil
}

// closeGently half-closes c and waits briefly for the peer to close, so the
// last message is not lost to a reset.
func closeGently(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, c)
	}
	_ = c.Close()
}

func missingRanks(peers []*peer) string {
	var miss []string
	for r := 1; r < len(peers); r++ {
		if peers[r] == nil {
			miss = append(miss, fmt.Sprint(r))
		}
	}
	if len(miss) == 1 {
		return "rank " + miss[0]
	}
	return "ranks " + strings.Join(miss, ", ")
}

func (t *TCP) connect(ctx context.Context, o TCPOptions) error {
	deadline := time.Now().Add(o.Timeout)
	var c net.Conn
	var lastErr error
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("rendezvous interrupted on rank %d", o.Rank)
		}
		d := net.Dialer{Timeout: time.Second}
		c, lastErr = d.DialContext(ctx, "tcp", o.Addr)
		if lastErr == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rank %d could not reach rank 0 at %s within %v: %v", o.Rank, o.Addr, o.Timeout, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := newPeer(0, c)
	t.peers = []*peer{p}
	h, _ := json.Marshal(hello{Rank: o.Rank, Size: o.Size, Host: o.Host, Args: o.Args})
	if err := writeFrame(p, frameHello, h); err != nil {
		return fmt.Errorf("rank %d lost rank 0 at %s during the rendezvous: %v", o.Rank, o.Addr, err)
	}
	// Rank 0 answers once everyone arrived, or explains why not; allow it
	// a little longer than the rendezvous itself to say so.
	_ = c.SetReadDeadline(deadline.Add(5 * time.Second))
	typ, payload, err := readFrame(c)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return fmt.Errorf("rank %d: no answer from rank 0 at %s: %v", o.Rank, o.Addr, err)
	case typ == frameError && len(payload) > 0:
		return errors.New(string(payload))
	case typ == frameError:
		return fmt.Errorf("rank 0 refused rank %d", o.Rank)
	case typ != frameWelcome:
		return fmt.Errorf("rank %d: unexpected answer from rank 0", o.Rank)
	}
	var w welcome
	if err := json.Unmarshal(payload, &w); err != nil || len(w.Hosts) != o.Size {
		return fmt.Errorf("rank %d: malformed answer from rank 0", o.Rank)
	}
	t.hosts = w.Hosts
	return nil
}

// read delivers one peer's data frames and turns a lost connection into an
// error for every process.
func (t *TCP) read(p *peer) {
	r := bufio.NewReader(p.conn)
	for {
		typ, payload, err := readFrame(r)
		if err != nil {
			select {
			case <-t.closing:
				// Leaving: a disconnect is expected, but still wakes a
				// caller waiting in the final barrier.
				t.lostOnce.Do(func() { t.lostErr <- fmt.Errorf("rank %d left", p.rank) })
				return
			default:
			}
			if t.rank == 0 {
				t.lost(fmt.Errorf("rank %d (%s) disconnected: it exited or its host failed", p.rank, t.hosts[p.rank]))
			} else {
				t.lost(fmt.Errorf("rank 0 (%s) disconnected: it exited or its host failed", t.hosts[0]))
			}
			return
		}
		switch typ {
		case frameData:
			p.data <- payload
		case frameAbort:
			t.lost(errors.New(string(payload)))
			return
		}
	}
}

// lost records the first failure, tells every other process (rank 0 relays)
// and calls the handler.
func (t *TCP) lost(err error) {
	t.lostOnce.Do(func() {
		// Tell the others before waking this process's own callers, which
		// may exit at once.
		if t.rank == 0 {
			for _, p := range t.peers {
				if p != nil {
					_ = writeFrame(p, frameAbort, []byte(err.Error()))
				}
			}
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

// Abort reports this process's failure to every process of the world.
func (t *TCP) Abort(cause error) {
	msg := fmt.Sprintf("rank %d (%s) failed: %v", t.rank, t.hosts[t.rank], cause)
	if t.rank != 0 {
		_ = writeFrame(t.peers[0], frameAbort, []byte(msg))
	}
	t.lost(errors.New(msg))
}

// OnPeerLost sets the function called once when a process of the world
// disconnects or another process reports a failure.
func (t *TCP) OnPeerLost(f func(error)) {
	t.mu.Lock()
	t.onLost = f
	t.mu.Unlock()
}

// Rank is this process's rank.
func (t *TCP) Rank() int { return t.rank }

// Size is the number of processes.
func (t *TCP) Size() int { return t.size }

// Hosts lists each rank's host.
func (t *TCP) Hosts() []string { return t.hosts }

// recv waits for the next message from p. A message that arrived before the
// connection was lost is still delivered: the reader queues a peer's data
// before it reports that peer gone, so data already queued wins over the
// loss (rank 0 closes right after the final barrier's answer).
func (t *TCP) recv(p *peer) ([]byte, error) {
	select {
	case d := <-p.data:
		return d, nil
	case err := <-t.lostErr:
		t.lostErr <- err // keep it for the next caller
		select {
		case d := <-p.data:
			return d, nil
		default:
			return nil, err
		}
	}
}

// AllGather returns every rank's data, by rank.
func (t *TCP) AllGather(data []byte) ([][]byte, error) {
	if t.rank != 0 {
		p := t.peers[0]
		if err := writeFrame(p, frameData, data); err != nil {
			return nil, fmt.Errorf("sending to rank 0: %w", err)
		}
		b, err := t.recv(p)
		if err != nil {
			return nil, err
		}
		return decodeList(b)
	}
	all := make([][]byte, t.size)
	all[0] = data
	for r := 1; r < t.size; r++ {
		b, err := t.recv(t.peers[r])
		if err != nil {
			return nil, err
		}
		all[r] = b
	}
	enc := encodeList(all)
	for _, p := range t.peers[1:] {
		if err := writeFrame(p, frameData, enc); err != nil {
			return nil, fmt.Errorf("sending to rank %d: %w", p.rank, err)
		}
	}
	return all, nil
}

// Close waits for every rank at a final barrier, then disconnects.
// Disconnects from here on are expected and reported to no one.
func (t *TCP) Close() error {
	t.closeOnce.Do(func() { close(t.closing) })
	_, err := t.AllGather(nil)
	t.closeConns()
	return err
}

func (t *TCP) closeConns() {
	t.closeOnce.Do(func() { close(t.closing) })
	for _, p := range t.peers {
		if p != nil {
			p.conn.Close()
		}
	}
}

func encodeList(items [][]byte) []byte {
	n := 4
	for _, it := range items {
		n += 4 + len(it)
	}
	out := make([]byte, 0, n)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(items)))
	for _, it := range items {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(it)))
		out = append(out, it...)
	}
	return out
}

func decodeList(b []byte) ([][]byte, error) {
	bad := errors.New("malformed control message")
	if len(b) < 4 {
		return nil, bad
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return nil, bad
		}
		l := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if len(b) < l {
			return nil, bad
		}
		out = append(out, b[:l:l])
		b = b[l:]
	}
	return out, nil
}
