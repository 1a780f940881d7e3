package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"collbench/internal/secret"
)

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
	if t.beats, err = openBeatPath(t.localIP, o.Token, 0, o.Size); err != nil && o.Warn != nil {
		o.Warn(fmt.Sprintf("warning: no heartbeat port on %s (%v): heartbeats ride the control connections, and a silent process is named later", t.localIP, err))
	}
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
			t.beats.watch(h.Rank, a.c.RemoteAddr(), h.BeatPort)
			nonces[h.Rank] = [2][]byte{a.nonce, h.Nonce}
			arrived++
		}
	}
	for r, p := range t.peers {
		if p == nil {
			continue
		}
		w := welcome{Hosts: t.hosts, PIDs: t.pids, BeatPort: t.beats.port()}
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
		if err := payload.err; err != nil && (!errors.As(err, &ne) || !ne.Timeout()) && time.Now().Before(deadline) {
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
	if t.beats == nil {
		if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
			t.beats, _ = openBeatPath(a.IP.String(), o.Token, o.Rank, o.Size) // none: the beats ride the control connection
		}
	}
	h := hello{Rank: o.Rank, Size: o.Size, Host: o.Host, PID: os.Getpid(), Args: o.Args, Nonce: secret.Nonce(), Secret: o.Token != nil, BeatPort: t.beats.port()}
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
	t.beats.watch(0, c.RemoteAddr(), w.BeatPort)
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		t.localIP = a.IP.String()
	}
	return nil
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
