package bootstrap

import (
	"container/list"
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
	order   *list.List // of net.Conn, oldest first
	at      map[net.Conn]*list.Element
	dropped atomic.Int64
}

func newPending(max int) *pending {
	return &pending{max: max, order: list.New(), at: map[net.Conn]*list.Element{}}
}

func (p *pending) add(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.order.Len() >= p.max {
		old := p.order.Remove(p.order.Front()).(net.Conn)
		delete(p.at, old)
		old.Close() // its handshake fails and finds itself dropped
		p.dropped.Add(1)
	}
	p.at[c] = p.order.PushBack(c)
}

// remove takes c off the list, once its handshake is over; false when it
// was dropped (closed) meanwhile.
func (p *pending) remove(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.at[c]
	if ok {
		p.order.Remove(e)
		delete(p.at, c)
	}
	return ok
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

// serve is rank 0's rendezvous: it admits each rank that proves the job
// secret, places it in the bootstrap tree, and tells the world it formed;
// it fails with the reason when a rank is refused, lost or late.
func (t *TCP) serve(ctx context.Context, o TCPOptions) error {
	ln, err := t.listen(o)
	if err != nil {
		return err
	}
	defer ln.Close()
	deadline := time.Now().Add(o.Timeout)
	done := make(chan struct{})
	defer close(done)
	arrivals := make(chan arrival)
	refusals := make(chan string, 16)
	// Handshakes in progress, oldest first. When maxPending are open, the
	// oldest is dropped to make room: a real rank answers its challenge
	// within moments, so a flood of idle connections only pushes out its
	// own members and can never keep a rank from joining.
	// A world of n ranks may have every one of them in a handshake at once.
	pend := newPending(max(maxPending, 2*o.Size))
	go acceptHandshakes(ln, o.Token, pend, arrivals, refusals, done)
	t.fanout = o.Fanout
	close(t.placed)
	hosts := make([]string, o.Size)
	t.pids = make([]int, o.Size)
	hosts[0], t.pids[0] = o.Host, os.Getpid()
	t.linkMu.Lock()
	t.hosts = hosts
	t.linkMu.Unlock()
	setHost := func(r int, h string, pid int) {
		t.linkMu.Lock()
		t.hosts[r], t.pids[r] = h, pid
		t.linkMu.Unlock()
	}
	arrivedAt := make([]bool, o.Size)
	linked := make([]bool, o.Size)
	arrivedAt[0], linked[0] = true, true
	treeAddr := make([]string, o.Size)
	nLinked := 1
	waiting := map[int][]arrival{} // admitted ranks whose parent has not arrived, by parent
	var refused []string
	note := func(why string) {
		if len(refused) < maxRefusals {
			refused = append(refused, why)
		}
		if o.Warn != nil {
			o.Warn("rendezvous: refused " + why)
		}
	}
	// fail ends the rendezvous on msg (failRendezvous).
	fail := func(msg string, grace bool) error { return t.failRendezvous(msg, grace, waiting, deadline, arrivals) }
	// place answers an admitted rank with its place in the tree: a child
	// of rank 0 keeps this connection as its link; any other rank is sent
	// to its parent once the parent has arrived.
	place := func(a arrival, parentArrived bool) error {
		r := a.h.Rank
		p := parentOf(r, o.Fanout)
		if p != 0 && !parentArrived {
			waiting[p] = append(waiting[p], a)
			return nil
		}
		w := welcome{Parent: p, Fanout: o.Fanout}
		if p == 0 {
			w.BeatPort = t.beats.port()
		} else {
			w.ParentHost, w.Addr = hosts[p], treeAddr[p]
		}
		if o.Token != nil {
			w.Proof = secret.Proof(o.Token, "collbench/welcome", a.h.Nonce, a.nonce, r, o.Size, w.Parent, w.Addr, w.Fanout)
		}
		b, _ := json.Marshal(w)
		_ = a.c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		if err := writeFrameTo(a.c, frameWelcome, b); err != nil {
			a.c.Close()
			return fmt.Errorf("rank %d (%s) disconnected during the rendezvous", r, hosts[r])
		}
		if p != 0 {
			go closeGently(a.c) // the rank closes it once it has read its place
			return nil
		}
		_ = a.c.SetDeadline(time.Time{})
		t.beats.watch(r, a.c.RemoteAddr(), a.h.BeatPort)
		t.addDown(newPeer(r, a.c))
		linked[r] = true
		nLinked++
		return nil
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for nLinked < o.Size {
		select {
		case <-ctx.Done():
			return fail("rendezvous interrupted on rank 0", true)
		case err := <-t.lostErr:
			// A rank that had joined disconnected, or failed, before the
			// world formed.
			return fail(err.Error(), true)
		case why := <-refusals:
			note(why)
		case <-t.joinedCh:
			for _, r := range t.takeJoined() {
				if r > 0 && r < o.Size && arrivedAt[r] && !linked[r] {
					linked[r] = true
					nLinked++
				}
			}
		case <-timer.C:
			msg := t.timeoutMsg(o, arrivedAt, linked, pend.dropped.Load(), refused)
			return fail(msg, false)
		case a := <-arrivals:
			h := a.h
			why, fatal := admission(h, o, arrivedAt, hosts)
			if fatal != "" {
				go refuse(a.c, fatal)
				return fail(fatal, true)
			}
			if why != "" {
				go refuse(a.c, "refused by rank 0: "+why)
				note(why)
				continue
			}
			setHost(h.Rank, h.Host, h.PID)
			arrivedAt[h.Rank] = true
			if ip, ok := a.c.RemoteAddr().(*net.TCPAddr); ok && h.TreePort > 0 {
				treeAddr[h.Rank] = net.JoinHostPort(ip.IP.String(), fmt.Sprint(h.TreePort))
			}
			if err := place(a, arrivedAt[parentOf(h.Rank, o.Fanout)]); err != nil {
				return fail(err.Error(), true)
			}
			for _, c := range waiting[h.Rank] {
				if err := place(c, true); err != nil {
					return fail(err.Error(), true)
				}
			}
			delete(waiting, h.Rank)
		}
	}
	b, _ := json.Marshal(worldMsg{Hosts: hosts, PIDs: t.pids})
	if err := t.sendWorld(b); err != nil {
		return fail(err.Error(), false)
	}
	return nil
}

// failRendezvous explains the failure down the tree and to every rank
// waiting for its place, and, with grace, for a few seconds to ranks still
// arriving (not after a timeout: they are not coming), instead of leaving
// them to a reset connection. It returns msg as the error.
func (t *TCP) failRendezvous(msg string, grace bool, waiting map[int][]arrival, deadline time.Time, arrivals <-chan arrival) error {
	t.lost(&PeerError{Kind: FaultFailed, Rank: -1, Msg: msg})
	var cs []net.Conn
	for _, ws := range waiting {
		for _, a := range ws {
			cs = append(cs, a.c)
		}
	}
	refuseAll(cs, msg)
	if grace {
		end := time.After(min(5*time.Second, time.Until(deadline)+time.Second))
	drain:
		for {
			select {
			case a := <-arrivals:
				go refuse(a.c, msg)
			case <-end:
				break drain
			}
		}
	}
	return errors.New(msg)
}

// listen opens rank 0's rendezvous port (or takes o.Listener) and its
// heartbeat port, warning where heartbeats or the job secret are missing.
func (t *TCP) listen(o TCPOptions) (net.Listener, error) {
	ln := o.Listener
	la := o.Addr
	if ln == nil {
		var err error
		if la, err = listenAddr(o.Addr); err != nil {
			return nil, err
		}
		if ln, err = net.Listen("tcp", la); err != nil {
			return nil, fmt.Errorf("rank 0 cannot serve the rendezvous on %s: %s", la, ListenReason(err))
		}
	}
	var err error
	t.localIP = ln.Addr().(*net.TCPAddr).IP.String()
	if t.beats, err = openBeatPath(t.localIP, o.Token, 0, o.Size); err != nil && o.Warn != nil {
		o.Warn(fmt.Sprintf("warning: no heartbeat port on %s (%v): heartbeats ride the control connections, and a silent process is named later", t.localIP, err))
	}
	if o.Token == nil && !isLoopback(la) && o.Warn != nil {
		o.Warn(fmt.Sprintf("warning: the rendezvous on %s has no job secret, so any process that reaches it can join; set %s for every rank", la, secret.EnvToken))
	}
	return ln, nil
}

// acceptHandshakes accepts connections to the rendezvous port until it
// closes, each one's handshake in a goroutine of its own: an admitted
// rank goes to arrivals, a refusal's reason to refusals (dropped when
// full).
func acceptHandshakes(ln net.Listener, token []byte, pend *pending, arrivals chan<- arrival, refusals chan<- string, done <-chan struct{}) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // the listener closed
		}
		pend.add(c)
		go func() {
			a, why, ok := handshake(c, token)
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
}

// refuseAll refuses every connection with msg, at once.
func refuseAll(cs []net.Conn, msg string) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refuse(c, msg)
		}()
	}
	wg.Wait()
}

// timeoutMsg says why the rendezvous timed out: who never arrived, or
// who never joined the tree, with the connections dropped and refused.
func (t *TCP) timeoutMsg(o TCPOptions, arrivedAt, linked []bool, dropped int64, refused []string) string {
	var msg string
	if miss := missingRanks(arrivedAt); miss != "" {
		msg = fmt.Sprintf("rendezvous at %s timed out after %v: %s never arrived", o.Addr, o.Timeout, miss)
	} else {
		msg = fmt.Sprintf("rendezvous at %s timed out after %v: every rank arrived, but %s never joined the bootstrap tree (check that the hosts of this job can reach each other)",
			o.Addr, o.Timeout, t.unlinked(linked))
	}
	if n := dropped; n > 0 {
		msg += fmt.Sprintf("; %d connections to the rendezvous port sent no hello and were dropped (a flood or a port scan on %s: find what else connects to it)", n, o.Addr)
	}
	if len(refused) > 0 {
		msg += "; refused: " + strings.Join(refused, "; ")
	}
	return msg
}

// admission judges a rank's hello: why it is refused (it may not join),
// or fatal, why the job cannot run at all; both empty when it is admitted.
func admission(h hello, o TCPOptions, arrivedAt []bool, hosts []string) (why, fatal string) {
	switch {
	case h.Size != o.Size:
		return fmt.Sprintf("rank %d (%s) was started for a world of %d processes, rank 0 for %d", h.Rank, orUnknown(h.Host), h.Size, o.Size), ""
	case h.Rank <= 0 || h.Rank >= o.Size:
		return fmt.Sprintf("a process on %s says it is rank %d, outside the world of %d", orUnknown(h.Host), h.Rank, o.Size), ""
	case arrivedAt[h.Rank]:
		return fmt.Sprintf("a process on %s claims rank %d, already taken by a process on %s", orUnknown(h.Host), h.Rank, hosts[h.Rank]), ""
	case !reflect.DeepEqual(h.Args, o.Args):
		// It proved the secret (or none is in use): a rank of this
		// job started differently. The job cannot run.
		return "", fmt.Sprintf("rank %d (%s) was started with different arguments: %q; rank 0 has %q",
			h.Rank, h.Host, strings.Join(h.Args, " "), strings.Join(o.Args, " "))
	case h.TreePort <= 0 && len(childrenOf(h.Rank, o.Fanout, o.Size)) > 0:
		return "", fmt.Sprintf("rank %d (%s) could not open a port for its children in the bootstrap tree", h.Rank, h.Host)
	}
	return "", ""
}

// sendWorld tells the children that the world formed.
func (t *TCP) sendWorld(b []byte) error {
	for _, c := range t.links() {
		if c == t.up {
			continue
		}
		if err := c.send(frameWorld, b, handshakeTimeout); err != nil {
			return fmt.Errorf("%s disconnected during the rendezvous", t.who(c.rank))
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

func missingRanks(arrived []bool) string {
	var miss []string
	for r := 1; r < len(arrived); r++ {
		if !arrived[r] {
			miss = append(miss, fmt.Sprint(r))
		}
	}
	if len(miss) > 16 {
		miss = append(miss[:16], fmt.Sprintf("and %d more", len(miss)-16))
	}
	switch len(miss) {
	case 0:
		return ""
	case 1:
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
		return t.welcomed(ctx, o, c, h, challenge, typ, payload, deadline)
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
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok && t.localIP == "" {
		t.localIP = a.IP.String()
		t.beats, _ = openBeatPath(t.localIP, o.Token, o.Rank, o.Size) // none: the beats ride the control connection
		t.treePort = t.openTree(t.localIP, o, deadline)
	}
	h := hello{Rank: o.Rank, Size: o.Size, Host: o.Host, PID: os.Getpid(), Args: o.Args, Nonce: secret.Nonce(), Secret: o.Token != nil,
		BeatPort: t.beats.port(), TreePort: t.treePort}
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
// place in the tree, links to the parent and waits for the world to form.
func (t *TCP) welcomed(ctx context.Context, o TCPOptions, c net.Conn, h hello, challenge []byte, typ byte, a answer, deadline time.Time) error {
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
	if err := json.Unmarshal(payload, &w); err != nil {
		c.Close()
		return fmt.Errorf("rank %d: malformed answer from rank 0", o.Rank)
	}
	if o.Token != nil && !secret.Verify(o.Token, w.Proof, "collbench/welcome", h.Nonce, challenge, o.Rank, o.Size, w.Parent, w.Addr, w.Fanout) {
		c.Close()
		return fmt.Errorf("rank %d: the process at %s does not hold this job's secret; it is not this job's rank 0", o.Rank, o.Addr)
	}
	if w.Fanout < 1 || w.Parent != parentOf(o.Rank, w.Fanout) || (w.Parent != 0 && w.Addr == "") {
		c.Close()
		return fmt.Errorf("rank %d: malformed answer from rank 0", o.Rank)
	}
	t.fanout = w.Fanout
	close(t.placed)
	if len(childrenOf(o.Rank, w.Fanout, o.Size)) == 0 {
		t.closeTree()
	}
	link, beatPort := c, w.BeatPort
	if w.Parent != 0 {
		c.Close()
		if link, beatPort, err = t.linkParent(o, w, deadline); err != nil {
			return err
		}
	}
	_ = link.SetDeadline(time.Time{})
	t.beats.watch(w.Parent, link.RemoteAddr(), beatPort)
	p := newPeer(w.Parent, link)
	t.setUp(p)
	go t.read(p)
	wait := time.NewTimer(time.Until(deadline) + 10*time.Second)
	defer wait.Stop()
	var b []byte
	select {
	case b = <-t.worldCh:
	case err := <-t.lostErr:
		t.lostErr <- err
		return err
	case <-ctx.Done():
		return fmt.Errorf("rendezvous interrupted on rank %d", o.Rank)
	case <-wait.C:
		return fmt.Errorf("rank %d: the world did not form within %v of its start: rank 0 never said it had (this rank's parent is %s)", o.Rank, o.Timeout, t.who(w.Parent))
	}
	var wm worldMsg
	if err := json.Unmarshal(b, &wm); err != nil || len(wm.Hosts) != o.Size || len(wm.PIDs) != o.Size {
		return fmt.Errorf("rank %d: malformed world message from its parent", o.Rank)
	}
	t.linkMu.Lock()
	t.hosts, t.pids = wm.Hosts, wm.PIDs
	t.linkMu.Unlock()
	t.closeTree()
	return t.sendWorld(b)
}
