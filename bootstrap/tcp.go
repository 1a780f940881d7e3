package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"collbench/internal/secret"
)

// Frame types of the control protocol.
const (
	frameChallenge = 1 // rank 0 -> newcomer: a fresh nonce to prove the secret against
	frameHello     = 2 // newcomer -> rank 0: who it is, with its proof
	frameWelcome   = 3 // rank 0 -> rank: every rank arrived; the hosts; rank 0's proof
	frameError     = 4 // rank 0 -> newcomer: refused or the rendezvous failed, and why
	frameData      = 5
	frameAbort     = 6 // a fault that stops the world (JSON PeerError)
	frameBeat      = 7 // heartbeat, with the sender's progress as payload
)

const (
	// maxHello bounds what a connection may send before it is admitted.
	maxHello = 64 << 10
	// maxFrame bounds one control message after admission: control carries
	// ids, layouts, results and heartbeats, never collective data.
	maxFrame = 4 << 20
	// handshakeTimeout bounds each newcomer's handshake.
	handshakeTimeout = 5 * time.Second
	// maxRefusals bounds the refused connections an error message lists.
	maxRefusals = 4
)

// Defaults of the heartbeat.
const (
	DefaultBeatEvery = time.Second
	DefaultSilence   = 20 * time.Second
)

// TCPOptions configure Join.
type TCPOptions struct {
	Rank, Size int
	// Addr is rank 0's address, host:port. Rank 0 listens on exactly this
	// address (a host name is resolved to this host's own address).
	Addr string
	// Host is this process's host identity (NCCL_HOSTID or the hostname).
	Host string
	// Args are compared at rendezvous: every rank must run the same command.
	Args []string
	// Timeout bounds the whole rendezvous.
	Timeout time.Duration
	// Token is the job secret; nil lets any process that reaches rank 0
	// join (a warning says so when the address is not loopback).
	Token []byte
	// BeatEvery is the heartbeat period and Silence how long a process may
	// go unheard before it is declared stopped (defaults above).
	BeatEvery, Silence time.Duration
	// Warn receives one-line warnings (rank 0 only); nil discards them.
	Warn func(string)
}

type hello struct {
	Rank   int      `json:"rank"`
	Size   int      `json:"size"`
	Host   string   `json:"host"`
	PID    int      `json:"pid"`
	Args   []string `json:"args"`
	Nonce  []byte   `json:"nonce"`
	Proof  []byte   `json:"proof,omitempty"`
	Secret bool     `json:"secret"` // the newcomer has a secret
}

type welcome struct {
	Hosts []string `json:"hosts"`
	PIDs  []int    `json:"pids"`
	Proof []byte   `json:"proof,omitempty"`
}

// FaultKind classifies why a world stopped.
type FaultKind string

// The kinds of fault a world reports.
const (
	// FaultDisconnected: a process's connection closed (it exited, was
	// killed, or its host failed).
	FaultDisconnected FaultKind = "disconnected"
	// FaultSilent: a process stopped answering heartbeats (stopped,
	// frozen or cut off) while its connection stayed open.
	FaultSilent FaultKind = "silent"
	// FaultFailed: a process reported an error of its own.
	FaultFailed FaultKind = "failed"
	// FaultHung: the watchdog found an operation that outlived its bound.
	FaultHung FaultKind = "hung"
	// FaultInterrupted: a process was interrupted (Ctrl-C, SIGTERM).
	FaultInterrupted FaultKind = "interrupted"
)

// maxPending bounds handshakes in progress at once; past it the oldest is
// dropped (a variable so tests can flood a smaller rendezvous).
var maxPending = 4096

// PeerError is a fault of the world, naming the rank at fault (Rank -1
// when no single rank is).
type PeerError struct {
	Kind FaultKind `json:"kind"`
	Rank int       `json:"rank"`
	Host string    `json:"host,omitempty"`
	Msg  string    `json:"msg"`
}

func (e *PeerError) Error() string { return e.Msg }

// Frame I/O.

// WriteFrame writes one frame of the control connection's framing (a type
// byte, a 4-byte length, the payload) to w; other pipes between collbench
// processes use it too.
func WriteFrame(w io.Writer, typ byte, payload []byte) error { return writeFrameTo(w, typ, payload) }

// ReadFrame reads one frame written by WriteFrame, refusing a payload over
// limit bytes.
func ReadFrame(r io.Reader, limit uint32) (byte, []byte, error) { return readFrame(r, limit) }

func writeFrameTo(w io.Writer, typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func readFrame(r io.Reader, limit uint32) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[1:])
	if n > limit {
		return 0, nil, fmt.Errorf("control message of %d bytes is over the %d-byte limit", n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return hdr[0], buf, nil
}

// queue holds a peer's data frames; the reader never blocks on it, so
// heartbeats are read however far behind the caller is.
type queue struct {
	mu    sync.Mutex
	items [][]byte
	ready chan struct{} // has a token while items is non-empty
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) push(b []byte) {
	q.mu.Lock()
	q.items = append(q.items, b)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) pop() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, false
	}
	b := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	if len(q.items) > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return b, true
}

type peer struct {
	rank int
	conn net.Conn
	w    *bufio.Writer
	wmu  sync.Mutex
	q    *queue
}

func newPeer(rank int, c net.Conn) *peer {
	return &peer{rank: rank, conn: c, w: bufio.NewWriter(c), q: newQueue()}
}

// send writes one frame within timeout.
func (p *peer) send(typ byte, payload []byte, timeout time.Duration) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.conn.SetWriteDeadline(time.Now().Add(timeout))
	if err := writeFrameTo(p.w, typ, payload); err != nil {
		return err
	}
	return p.w.Flush()
}

// TCP is a world of processes joined through rank 0 (a star): rank 0 holds
// a connection to every other rank and relays every message. Every process
// sends heartbeats carrying its progress; one that goes silent is named.
type TCP struct {
	rank, size int
	hosts      []string
	pids       []int
	peers      []*peer // rank 0: index by rank (nil at 0); others: [0] is rank 0
	localIP    string  // this host's address as the other processes reach it

	beatEvery, silence time.Duration
	seen               []atomic.Int64 // unix nanoseconds of the last frame from each rank
	status             atomic.Value   // func() []byte
	statusMu           sync.Mutex
	peerStatus         [][]byte // rank 0: the last heartbeat payload of each rank

	lostOnce  sync.Once
	lostErr   chan error
	closing   chan struct{}
	closeOnce sync.Once
	stopBeat  chan struct{}
	stopOnce  sync.Once
	onLost    func(error)
	mu        sync.Mutex
	waitHook  atomic.Value // func(rank int): whom a receive waits for, -1 when done
	loadNote  func(rank int, quiet time.Duration)
	// quietUntil (unix nanoseconds), for tests: this process sends no
	// heartbeat until then, as a process starved of CPU would not.
	quietUntil atomic.Int64
}

// OnWait sets a function told which process rank a receive of the control
// connection waits for before it blocks, and -1 once it has its message,
// so a watchdog can follow who waits for whom.
func (t *TCP) OnWait(f func(rank int)) { t.waitHook.Store(f) }

func (t *TCP) waiting(rank int) {
	if f, ok := t.waitHook.Load().(func(int)); ok && f != nil {
		f(rank)
	}
}

// Join forms the world: rank 0 serves the rendezvous at Addr and waits for
// every other rank; the others connect, retrying until the timeout. With a
// token every newcomer must prove it holds it; a connection that cannot, or
// that claims a taken rank or a wrong world size, is refused on its own and
// never stops the world. An error names the ranks that never arrived, or
// the rank whose arguments differ.
func Join(ctx context.Context, o TCPOptions) (*TCP, error) {
	if o.Size < 2 {
		return nil, fmt.Errorf("a world of %d processes needs no rendezvous", o.Size)
	}
	if o.Rank < 0 || o.Rank >= o.Size {
		return nil, fmt.Errorf("rank %d does not fit a world of %d", o.Rank, o.Size)
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.BeatEvery <= 0 {
		o.BeatEvery = DefaultBeatEvery
	}
	if o.Silence <= 0 {
		o.Silence = DefaultSilence
	}
	if o.Silence < 2*o.BeatEvery {
		o.Silence = 2 * o.BeatEvery
	}
	t := &TCP{rank: o.Rank, size: o.Size, lostErr: make(chan error, 1), closing: make(chan struct{}),
		stopBeat: make(chan struct{}), beatEvery: o.BeatEvery, silence: o.Silence,
		seen: make([]atomic.Int64, o.Size), peerStatus: make([][]byte, o.Size)}
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
	now := time.Now().UnixNano()
	for r := range t.seen {
		t.seen[r].Store(now)
	}
	for _, p := range t.peers {
		if p != nil {
			go t.read(p)
		}
	}
	go t.beat()
	return t, nil
}

// listenAddr returns the address rank 0 binds: exactly the one it was
// given. A host name must resolve to an address of this host.
func listenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("invalid rendezvous address %q (want host:port): %v", addr, err)
	}
	if host == "" {
		return "", fmt.Errorf("invalid rendezvous address %q: no host (give rank 0's address, e.g. 10.0.0.5:%s)", addr, port)
	}
	if ip := net.ParseIP(host); ip != nil || host == "localhost" {
		return net.JoinHostPort(host, port), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return "", fmt.Errorf("rendezvous host %q does not resolve: %v", host, err)
	}
	local := localIPs()
	for _, ip := range ips {
		if ip.IsLoopback() || local[ip.String()] {
			return net.JoinHostPort(ip.String(), port), nil
		}
	}
	return "", fmt.Errorf("rendezvous host %q resolves to %v, none of which is an address of this host (rank 0 must run there; or set %s=<rank 0's IP>:%s)",
		host, ips, EnvRootAddr, port)
}

func localIPs() map[string]bool {
	out := map[string]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out[n.IP.String()] = true
		}
	}
	return out
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// arrival is one newcomer whose handshake finished.
type arrival struct {
	c     net.Conn
	h     hello
	nonce []byte // rank 0's challenge to it
}

// handshake challenges a newcomer and reads its hello within
// handshakeTimeout, refusing anything that is not a collbench rank holding
// the secret. ok is false when the connection was refused and closed.
func handshake(c net.Conn, token []byte) (arrival, string, bool) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	a := arrival{c: c, nonce: secret.Nonce()}
	if err := writeFrameTo(c, frameChallenge, a.nonce); err != nil {
		c.Close()
		return a, "", false
	}
	typ, payload, err := readFrame(c, maxHello)
	if err != nil || typ != frameHello || json.Unmarshal(payload, &a.h) != nil {
		// Not a collbench rank: a port scan, an idle or oversized
		// connection, a stale process. Nothing to explain to it.
		c.Close()
		return a, "", false
	}
	from := fmt.Sprintf("a process on %s claiming rank %d", orUnknown(a.h.Host), a.h.Rank)
	if token != nil && !secret.Verify(token, a.h.Proof, "collbench/hello", a.nonce, a.h.Nonce, a.h.Rank, a.h.Size) {
		why := "wrong job secret"
		if !a.h.Secret {
			why = "no job secret (" + secret.EnvToken + " is not set for it)"
		}
		refuse(c, fmt.Sprintf("refused by rank 0: %s", why))
		return a, fmt.Sprintf("%s: %s", from, why), false
	}
	return a, "", true
}

// pending holds the rendezvous connections whose handshake is in progress,
// oldest first, and drops the oldest when more than max are open.
type pending struct {
	mu      sync.Mutex
	max     int
	conns   []net.Conn
	dropped atomic.Int64
}

func (p *pending) add(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) >= p.max {
		p.conns[0].Close() // its handshake fails and removes it
		p.conns = p.conns[1:]
		p.dropped.Add(1)
	}
	p.conns = append(p.conns, c)
}

// remove takes c off the list, once its handshake is over; false when it
// was dropped (closed) meanwhile.
func (p *pending) remove(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return true
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown host"
	}
	return s
}

// refuse tells a newcomer why it is turned away and closes its connection.
func refuse(c net.Conn, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_ = writeFrameTo(c, frameError, []byte(msg))
	closeGently(c)
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
	t.localIP = ln.Addr().(*net.TCPAddr).IP.String()
	if o.Token == nil && !isLoopback(la) && o.Warn != nil {
		o.Warn(fmt.Sprintf("warning: the rendezvous on %s has no job secret, so any process that reaches it can join; set %s for every rank", la, secret.EnvToken))
	}
	deadline := time.Now().Add(o.Timeout)
	done := make(chan struct{})
	defer close(done)
	arrivals := make(chan arrival)
	refusals := make(chan string, 16)
	// Handshakes in progress, oldest first. When maxPending are open, the
	// oldest is dropped to make room: a real rank answers its challenge
	// within moments, so a flood of idle connections only pushes out its
	// own members and can never keep a rank from joining.
	pend := &pending{max: maxPending}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // the listener closed
			}
			pend.add(c)
			go func() {
				a, why, ok := handshake(c, o.Token)
				if !pend.remove(c) && ok {
					return // dropped while it answered: its rank joins again
				}
				if !ok {
					if why != "" {
						select {
						case refusals <- why:
						default:
						}
					}
					return
				}
				select {
				case arrivals <- a:
				case <-done:
					refuse(c, "the rendezvous is over")
				}
			}()
		}
	}()
	t.peers = make([]*peer, o.Size)
	t.hosts = make([]string, o.Size)
	t.pids = make([]int, o.Size)
	t.hosts[0], t.pids[0] = o.Host, os.Getpid()
	nonces := make([][2][]byte, o.Size)
	var refused []string
	note := func(why string) {
		if len(refused) < maxRefusals {
			refused = append(refused, why)
		}
		if o.Warn != nil {
			o.Warn("rendezvous: refused " + why)
		}
	}
	// fail explains the failure to every admitted rank, and for a few
	// seconds to ranks still arriving (not after a timeout: they are not
	// coming), instead of leaving them to a reset connection.
	fail := func(msg string, grace bool) error {
		for _, p := range t.peers {
			if p != nil {
				refuse(p.conn, msg)
			}
		}
		if grace {
			end := time.After(min(5*time.Second, time.Until(deadline)+time.Second))
		drain:
			for {
				select {
				case a := <-arrivals:
					refuse(a.c, msg)
				case <-end:
					break drain
				}
			}
		}
		return errors.New(msg)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for arrived := 1; arrived < o.Size; {
		select {
		case <-ctx.Done():
			return fail("rendezvous interrupted on rank 0", true)
		case why := <-refusals:
			note(why)
		case <-timer.C:
			msg := fmt.Sprintf("rendezvous at %s timed out after %v: %s never arrived", o.Addr, o.Timeout, missingRanks(t.peers))
			if n := pend.dropped.Load(); n > 0 {
				msg += fmt.Sprintf("; %d connections to the rendezvous port sent no hello and were dropped (a flood or a port scan on %s: find what else connects to it)", n, o.Addr)
			}
			if len(refused) > 0 {
				msg += "; refused: " + strings.Join(refused, "; ")
			}
			return fail(msg, false)
		case a := <-arrivals:
			h := a.h
			switch {
			case h.Size != o.Size:
				why := fmt.Sprintf("rank %d (%s) was started for a world of %d processes, rank 0 for %d", h.Rank, orUnknown(h.Host), h.Size, o.Size)
				refuse(a.c, "refused by rank 0: "+why)
				note(why)
				continue
			case h.Rank <= 0 || h.Rank >= o.Size:
				why := fmt.Sprintf("a process on %s says it is rank %d, outside the world of %d", orUnknown(h.Host), h.Rank, o.Size)
				refuse(a.c, "refused by rank 0: "+why)
				note(why)
				continue
			case t.peers[h.Rank] != nil:
				why := fmt.Sprintf("a process on %s claims rank %d, already taken by a process on %s", orUnknown(h.Host), h.Rank, t.hosts[h.Rank])
				refuse(a.c, "refused by rank 0: "+why)
				note(why)
				continue
			case !reflect.DeepEqual(h.Args, o.Args):
				// It proved the secret (or none is in use): a rank of this
				// job started differently. The job cannot run.
				t.peers[h.Rank] = newPeer(h.Rank, a.c)
				return fail(fmt.Sprintf("rank %d (%s) was started with different arguments: %q; rank 0 has %q",
					h.Rank, h.Host, strings.Join(h.Args, " "), strings.Join(o.Args, " ")), true)
			}
			t.peers[h.Rank] = newPeer(h.Rank, a.c)
			t.hosts[h.Rank], t.pids[h.Rank] = h.Host, h.PID
			nonces[h.Rank] = [2][]byte{a.nonce, h.Nonce}
			arrived++
		}
	}
	for r, p := range t.peers {
		if p == nil {
			continue
		}
		w := welcome{Hosts: t.hosts, PIDs: t.pids}
		if o.Token != nil {
			w.Proof = secret.Proof(o.Token, "collbench/welcome", nonces[r][1], nonces[r][0], r, o.Size)
		}
		b, _ := json.Marshal(w)
		_ = p.conn.SetDeadline(time.Time{})
		if err := p.send(frameWelcome, b, handshakeTimeout); err != nil {
			return fail(fmt.Sprintf("rank %d (%s) disconnected during the rendezvous", r, t.hosts[r]), false)
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
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
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
	if len(miss) > 16 {
		miss = append(miss[:16], fmt.Sprintf("and %d more", len(miss)-16))
	}
	if len(miss) == 1 {
		return "rank " + miss[0]
	}
	return "ranks " + strings.Join(miss, ", ")
}

func (t *TCP) connect(ctx context.Context, o TCPOptions) error {
	deadline := time.Now().Add(o.Timeout)
	cut := 0 // connections rank 0 closed before its answer
	for {
		c, h, challenge, typ, payload, err := t.hello(ctx, o, deadline, &cut)
		if err != nil {
			return err
		}
		// A connection closed without a word before rank 0's answer was
		// dropped by a crowded rendezvous (rank 0 explains every refusal
		// and every failure): join again while time is left.
		var ne net.Error
		if err := payload.err; err != nil && !(errors.As(err, &ne) && ne.Timeout()) && time.Now().Before(deadline) {
			c.Close()
			cut++
			continue
		}
		if err := t.welcomed(o, c, h, challenge, typ, payload); err != nil {
			return err
		}
		return nil
	}
}

// answer is rank 0's reply to a hello, or the error reading it.
type answer struct {
	b   []byte
	err error
}

// hello dials rank 0 until it greets (a connection closed before the
// greeting is tried again), sends this rank's hello and reads the answer.
func (t *TCP) hello(ctx context.Context, o TCPOptions, deadline time.Time, cut *int) (net.Conn, hello, []byte, byte, answer, error) {
	var c net.Conn
	var challenge []byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, hello{}, nil, 0, answer{}, fmt.Errorf("rendezvous interrupted on rank %d", o.Rank)
		}
		d := net.Dialer{Timeout: time.Second}
		var err error
		c, err = d.DialContext(ctx, "tcp", o.Addr)
		if err == nil {
			// The challenge comes at once from a collbench rank 0. A
			// connection closed before it was dropped by a rank 0 whose
			// rendezvous is crowded (a flood of idle connections): try
			// again. Anything else is not a collbench rank 0.
			_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
			var typ byte
			typ, challenge, err = readFrame(c, maxHello)
			if err == nil && (typ != frameChallenge || len(challenge) != secret.NonceSize) {
				c.Close()
				return nil, hello{}, nil, 0, answer{}, fmt.Errorf("rank %d: %s does not answer as a collbench rank 0 (unexpected greeting)", o.Rank, o.Addr)
			}
			if err == nil {
				break
			}
			c.Close()
			*cut++
		}
		if time.Now().After(deadline) {
			if *cut > 0 {
				return nil, hello{}, nil, 0, answer{}, fmt.Errorf("rank %d could not join rank 0 at %s within %v: rank 0 closed the connection before answering %d times (its rendezvous port may be flooded by other connections; last: %v)",
					o.Rank, o.Addr, o.Timeout, *cut, err)
			}
			return nil, hello{}, nil, 0, answer{}, fmt.Errorf("rank %d could not reach rank 0 at %s within %v: %v", o.Rank, o.Addr, o.Timeout, err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	h := hello{Rank: o.Rank, Size: o.Size, Host: o.Host, PID: os.Getpid(), Args: o.Args, Nonce: secret.Nonce(), Secret: o.Token != nil}
	if o.Token != nil {
		h.Proof = secret.Proof(o.Token, "collbench/hello", challenge, h.Nonce, o.Rank, o.Size)
	}
	hb, _ := json.Marshal(h)
	if err := writeFrameTo(c, frameHello, hb); err != nil {
		return c, h, challenge, 0, answer{err: err}, nil
	}
	// Rank 0 answers once everyone arrived, or explains why not; allow it
	// a little longer than the rendezvous itself to say so.
	_ = c.SetDeadline(deadline.Add(5 * time.Second))
	typ, payload, err := readFrame(c, maxFrame)
	_ = c.SetDeadline(time.Time{})
	return c, h, challenge, typ, answer{b: payload, err: err}, nil
}

// welcomed reads rank 0's answer to this rank's hello and, if it is a
// welcome, joins the world.
func (t *TCP) welcomed(o TCPOptions, c net.Conn, h hello, challenge []byte, typ byte, a answer) error {
	payload, err := a.b, a.err
	switch {
	case err != nil:
		c.Close()
		return fmt.Errorf("rank %d: no answer from rank 0 at %s: %v", o.Rank, o.Addr, err)
	case typ == frameError && len(payload) > 0:
		c.Close()
		return errors.New(string(payload))
	case typ != frameWelcome:
		c.Close()
		return fmt.Errorf("rank %d: unexpected answer from rank 0", o.Rank)
	}
	var w welcome
	if err := json.Unmarshal(payload, &w); err != nil || len(w.Hosts) != o.Size || len(w.PIDs) != o.Size {
		c.Close()
		return fmt.Errorf("rank %d: malformed answer from rank 0", o.Rank)
	}
	if o.Token != nil && !secret.Verify(o.Token, w.Proof, "collbench/welcome", h.Nonce, challenge, o.Rank, o.Size) {
		c.Close()
		return fmt.Errorf("rank %d: the process at %s does not hold this job's secret; it is not this job's rank 0", o.Rank, o.Addr)
	}
	t.peers = []*peer{newPeer(0, c)}
	t.hosts, t.pids = w.Hosts, w.PIDs
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		t.localIP = a.IP.String()
	}
	return nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// who names a rank with its host and process id.
func (t *TCP) who(r int) string {
	if r < 0 || r >= len(t.hosts) {
		return fmt.Sprintf("rank %d", r)
	}
	if r < len(t.pids) && t.pids[r] > 0 {
		return fmt.Sprintf("rank %d (%s, pid %d)", r, t.hosts[r], t.pids[r])
	}
	return fmt.Sprintf("rank %d (%s)", r, t.hosts[r])
}

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
			t.lost(&PeerError{Kind: FaultDisconnected, Rank: p.rank, Host: t.hosts[p.rank],
				Msg: fmt.Sprintf("%s disconnected: it exited, was killed, or its host failed", t.who(p.rank))})
			return
		}
		t.seen[p.rank].Store(time.Now().UnixNano())
		switch typ {
		case frameData:
			p.q.push(payload)
		case frameBeat:
			if t.rank == 0 {
				t.statusMu.Lock()
				t.peerStatus[p.rank] = payload
				t.statusMu.Unlock()
			}
		case frameAbort:
			var pe PeerError
			if json.Unmarshal(payload, &pe) != nil || pe.Msg == "" {
				pe = PeerError{Kind: FaultFailed, Rank: p.rank, Msg: string(payload)}
			}
			t.lost(&pe)
			return
		}
	}
}

// beat sends heartbeats and names a process that went silent: rank 0
// watches every rank, the others watch rank 0.
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
		var payload []byte
		if f, ok := t.status.Load().(func() []byte); ok && f != nil {
			payload = f()
		}
		for _, p := range t.peers {
			if p != nil && time.Now().UnixNano() >= t.quietUntil.Load() {
				// A failed write shows up as a lost connection or silence.
				_ = p.send(frameBeat, payload, t.silence)
			}
		}
		now := time.Now()
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			quiet := now.Sub(time.Unix(0, t.seen[p.rank].Load()))
			if quiet > t.silence+lag {
				select {
				case <-t.closing:
					return
				default:
				}
				if !silentPast(quiet, t.silence, lag, t.runsHere(p.rank)) {
					if !extended[p.rank] {
						extended[p.rank] = true
						if t.loadNote != nil {
							t.loadNote(p.rank, quiet)
						}
					}
					continue
				}
				t.lost(&PeerError{Kind: FaultSilent, Rank: p.rank, Host: t.hosts[p.rank],
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

// PeerStatus returns, on rank 0, the last heartbeat payload of rank r and
// when rank r was last heard from.
func (t *TCP) PeerStatus(r int) ([]byte, time.Time) {
	t.statusMu.Lock()
	defer t.statusMu.Unlock()
	return t.peerStatus[r], time.Unix(0, t.seen[r].Load())
}

// lost records the first fault, tells every other process (rank 0 relays)
// and calls the handler.
func (t *TCP) lost(err error) {
	t.lostOnce.Do(func() {
		pe := asPeerError(err)
		// Tell the others before waking this process's own callers, which
		// may exit at once; a stopped peer must not hold this up.
		if t.rank == 0 && pe != nil {
			b, _ := json.Marshal(pe)
			var wg sync.WaitGroup
			gone := pe.Kind == FaultDisconnected || pe.Kind == FaultSilent
			for _, p := range t.peers {
				// A hung rank is told too, so it stops; a gone one cannot be.
				if p != nil && !(gone && p.rank == pe.Rank) {
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
		pe = &PeerError{Kind: kind, Rank: t.rank, Host: t.hosts[t.rank], Msg: fmt.Sprintf("rank %d (%s) failed: %v", t.rank, t.hosts[t.rank], cause)}
		if kind == FaultInterrupted {
			pe.Msg = fmt.Sprintf("rank %d (%s) was interrupted", t.rank, t.hosts[t.rank])
		}
	}
	if t.rank != 0 {
		b, _ := json.Marshal(pe)
		_ = t.peers[0].send(frameAbort, b, 2*time.Second)
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

// Rank is this process's rank.
func (t *TCP) Rank() int { return t.rank }

// Size is the number of processes.
func (t *TCP) Size() int { return t.size }

// Hosts lists each rank's host.
func (t *TCP) Hosts() []string { return t.hosts }

// PIDs lists each rank's process id.
func (t *TCP) PIDs() []int { return t.pids }

// LocalIP is the address of this host that the other processes reach it
// at: the one rank 0 serves on, or the one this rank reached rank 0 from.
func (t *TCP) LocalIP() string { return t.localIP }

// Silence is how long a process may go unheard before it is named.
func (t *TCP) Silence() time.Duration { return t.silence }

// recv waits for the next message from p. A message that arrived before the
// connection was lost is still delivered: the reader queues a peer's data
// before it reports that peer gone, so data already queued wins over the
// loss (rank 0 closes right after the final barrier's answer).
func (t *TCP) recv(p *peer) ([]byte, error) {
	if d, ok := p.q.pop(); ok {
		return d, nil
	}
	t.waiting(p.rank)
	defer t.waiting(-1)
	for {
		if d, ok := p.q.pop(); ok {
			return d, nil
		}
		select {
		case <-p.q.ready:
		case err := <-t.lostErr:
			t.lostErr <- err // keep it for the next caller
			if d, ok := p.q.pop(); ok {
				return d, nil
			}
			return nil, err
		}
	}
}

// sendData writes a data frame to p; a failure is that peer's fault.
func (t *TCP) sendData(p *peer, data []byte) error {
	if err := p.send(frameData, data, t.silence); err != nil {
		select {
		case err := <-t.lostErr:
			t.lostErr <- err
			return err
		default:
		}
		pe := &PeerError{Kind: FaultDisconnected, Rank: p.rank, Host: t.hosts[p.rank],
			Msg: fmt.Sprintf("%s cannot be reached: %v", t.who(p.rank), err)}
		t.lost(pe)
		return pe
	}
	return nil
}

// AllGather returns every rank's data, by rank.
func (t *TCP) AllGather(data []byte) ([][]byte, error) {
	if t.rank != 0 {
		p := t.peers[0]
		if err := t.sendData(p, data); err != nil {
			return nil, err
		}
		b, err := t.recv(p)
		if err != nil {
			return nil, err
		}
		return decodeList(b)
	}
	all, err := t.collect(data)
	if err != nil {
		return nil, err
	}
	enc := encodeList(all)
	for _, p := range t.peers[1:] {
		if err := t.sendData(p, enc); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// Gather returns every rank's data, by rank, on rank 0; the others get nil.
func (t *TCP) Gather(data []byte) ([][]byte, error) {
	if t.rank != 0 {
		return nil, t.sendData(t.peers[0], data)
	}
	return t.collect(data)
}

func (t *TCP) collect(data []byte) ([][]byte, error) {
	all := make([][]byte, t.size)
	all[0] = data
	for r := 1; r < t.size; r++ {
		b, err := t.recv(t.peers[r])
		if err != nil {
			return nil, err
		}
		all[r] = b
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
	t.stopOnce.Do(func() { close(t.stopBeat) })
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
	if n > len(b)/4+1 {
		return nil, bad
	}
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
