package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"collbench/bootstrap"
	"collbench/internal/secret"
)

// The frames between a job's processes and the collector (bootstrap's
// framing): the collector's challenge, the process's hello with its proof
// of the job secret, the collector's welcome or refusal, then batches of
// summaries.
const (
	frameChallenge = 'C'
	frameHello     = 'H'
	frameWelcome   = 'W'
	frameRefused   = 'X'
	frameBatch     = 'S'
	proofLabel     = "collbench watch"
	frameLimit     = 4 << 20
	// handshakeWait bounds every step of the handshake, both sides.
	handshakeWait = 5 * time.Second
)

// hello is what a process says of itself.
type hello struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Proof []byte `json:"proof"`
}

// SenderOptions configure a Sender.
type SenderOptions struct {
	Addr string // the collector, host:port
	Key  []byte // the job secret
	Host string
	PID  int
	// Warn receives one line, once, when the collector cannot be reached
	// or refuses this process; after it the sender is silent.
	Warn func(string)
	// Queue bounds the summaries waiting to be sent (default 65,536);
	// Flush is how often a batch goes (default 100 ms).
	Queue int
	Flush time.Duration
}

// Sender sends a process's summaries to the collector without ever making
// the job wait: Send only queues, and drops (and counts) what the queue
// cannot hold; a collector that is gone, slow or refusing costs the job
// nothing but the dropped summaries.
type Sender struct {
	o       SenderOptions
	ch      chan Summary
	dropped atomic.Int64
	sent    atomic.Int64
	warned  sync.Once
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewSender starts sending in the background.
func NewSender(o SenderOptions) *Sender {
	if o.Queue <= 0 {
		o.Queue = 1 << 16
	}
	if o.Flush <= 0 {
		o.Flush = 100 * time.Millisecond
	}
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sender{o: o, ch: make(chan Summary, o.Queue), cancel: cancel, done: make(chan struct{})}
	go s.loop(ctx)
	return s
}

// Send queues one summary, or drops it when the queue is full; it never
// blocks.
func (s *Sender) Send(sum Summary) {
	select {
	case s.ch <- sum:
	default:
		s.dropped.Add(1)
	}
}

// Dropped and Sent count the summaries dropped and written so far.
func (s *Sender) Dropped() int64 { return s.dropped.Load() }

// Sent counts the summaries written to the collector.
func (s *Sender) Sent() int64 { return s.sent.Load() }

// Close stops the sender, within the handshake's bound at most.
func (s *Sender) Close() {
	s.cancel()
	<-s.done
}

func (s *Sender) warn(why string) {
	s.warned.Do(func() { s.o.Warn("collbench watch: " + why + "; the job runs on without it") })
}

// loop connects (again after a failure, at most every 30 s, silently),
// and sends what is queued; while not connected the queue is drained and
// counted as dropped.
func (s *Sender) loop(ctx context.Context) {
	defer close(s.done)
	var conn net.Conn
	var retry time.Time
	tick := time.NewTicker(s.o.Flush)
	defer tick.Stop()
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	var batch []Summary
	first := true
	for {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		first = false // the first pass connects at once: a collector that is not there is said at the start
		for len(s.ch) > 0 && len(batch) < s.o.Queue {
			batch = append(batch, <-s.ch)
		}
		if conn == nil && time.Now().After(retry) {
			c, err := s.connect(ctx)
			if err != nil && ctx.Err() != nil {
				return // closed while it dialled: nothing to say
			}
			if err != nil {
				s.warn(err.Error())
				retry = time.Now().Add(30 * time.Second)
			} else {
				conn = c
			}
		}
		if conn == nil {
			s.dropped.Add(int64(len(batch)))
			batch = batch[:0]
			continue
		}
		if len(batch) == 0 {
			continue
		}
		payload, err := json.Marshal(batch)
		if err == nil {
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			err = bootstrap.WriteFrame(conn, frameBatch, payload)
		}
		if err != nil {
			// Gone or too slow: drop the batch and connect again later.
			s.dropped.Add(int64(len(batch)))
			_ = conn.Close()
			conn, retry = nil, time.Now().Add(30*time.Second)
		} else {
			s.sent.Add(int64(len(batch)))
		}
		batch = batch[:0]
	}
}

// connect dials the collector and proves the job secret.
func (s *Sender) connect(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: handshakeWait}
	c, err := d.DialContext(ctx, "tcp", s.o.Addr)
	if err != nil {
		return nil, fmt.Errorf("the collector at %s does not answer (%v)", s.o.Addr, err)
	}
	fail := func(err error) (net.Conn, error) {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(handshakeWait))
	typ, nonce, err := bootstrap.ReadFrame(c, 64)
	if err != nil || typ != frameChallenge {
		return fail(fmt.Errorf("%s is not a collbench watch collector (no challenge)", s.o.Addr))
	}
	h, _ := json.Marshal(hello{Host: s.o.Host, PID: s.o.PID, Proof: secret.Proof(s.o.Key, proofLabel, nonce, s.o.Host, s.o.PID)})
	if err := bootstrap.WriteFrame(c, frameHello, h); err != nil {
		return fail(fmt.Errorf("the collector at %s closed the connection (%v)", s.o.Addr, err))
	}
	typ, why, err := bootstrap.ReadFrame(c, 1024)
	switch {
	case err != nil:
		return fail(fmt.Errorf("the collector at %s did not answer the hello (%v)", s.o.Addr, err))
	case typ == frameRefused:
		return fail(fmt.Errorf("the collector at %s refused this process: %s", s.o.Addr, why))
	case typ != frameWelcome:
		return fail(fmt.Errorf("%s is not a collbench watch collector", s.o.Addr))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// Server is the collector: it accepts the job's processes, checks each
// one's proof of the job secret, and feeds their summaries to one
// Collector, reporting every finding as it changes.
type Server struct {
	ln        net.Listener
	key       []byte
	mu        sync.Mutex
	c         *Collector
	onFinding func(Finding)
	onNote    func(string)
	conns     atomic.Int64
	received  atomic.Int64
	maxConns  int64
	wg        sync.WaitGroup
}

// ServerOptions configure a Server: the judge's Options, and what to call
// on a finding (a rank named or cleared) and on a note (a process refused).
type ServerOptions struct {
	Judge     Options
	OnFinding func(Finding)
	OnNote    func(string)
	// MaxConns bounds the processes connected at once (default 16,384).
	MaxConns int
}

// Listen opens the collector on addr.
func Listen(addr string, key []byte, o ServerOptions) (*Server, error) {
	if len(key) == 0 {
		return nil, errors.New("no job secret: set COLLBENCH_TOKEN (or COLLBENCH_TOKEN_FILE) for the job and the collector alike")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %v", addr, err)
	}
	if o.OnFinding == nil {
		o.OnFinding = func(Finding) {}
	}
	if o.OnNote == nil {
		o.OnNote = func(string) {}
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 1 << 14
	}
	return &Server{ln: ln, key: key, c: New(o.Judge), onFinding: o.OnFinding, onNote: o.OnNote, maxConns: int64(o.MaxConns)}, nil
}

// Addr is where the collector listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve accepts processes until ctx ends, then closes every connection
// and returns.
func (s *Server) Serve(ctx context.Context) error {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	go func() {
		<-ctx.Done()
		_ = s.ln.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if s.conns.Add(1) > s.maxConns {
			s.conns.Add(-1)
			_ = c.Close()
			s.onNote(fmt.Sprintf("a process from %s was turned away: %d processes are connected already", c.RemoteAddr(), s.maxConns))
			continue
		}
		mu.Lock()
		open[c] = true
		mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.conns.Add(-1)
			s.serve(c)
			mu.Lock()
			delete(open, c)
			mu.Unlock()
			_ = c.Close()
		}()
	}
}

// serve runs one process's connection: the handshake, then its batches.
func (s *Server) serve(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeWait))
	nonce := secret.Nonce()
	if bootstrap.WriteFrame(c, frameChallenge, nonce) != nil {
		return
	}
	typ, raw, err := bootstrap.ReadFrame(c, 4096)
	var h hello
	if err != nil || typ != frameHello || json.Unmarshal(raw, &h) != nil {
		s.onNote(fmt.Sprintf("%s sent no hello: not a collbench watch sender", c.RemoteAddr()))
		return
	}
	if !secret.Verify(s.key, h.Proof, proofLabel, nonce, h.Host, h.PID) {
		_ = bootstrap.WriteFrame(c, frameRefused, []byte("wrong job secret"))
		s.onNote(fmt.Sprintf("refused pid %d on %s (%s): wrong job secret", h.PID, h.Host, c.RemoteAddr()))
		return
	}
	if bootstrap.WriteFrame(c, frameWelcome, nil) != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	for {
		typ, raw, err := bootstrap.ReadFrame(c, frameLimit)
		if err != nil {
			return
		}
		if typ != frameBatch {
			continue
		}
		var batch []Summary
		if json.Unmarshal(raw, &batch) != nil {
			s.onNote(fmt.Sprintf("pid %d on %s sent a batch that does not read: dropped", h.PID, h.Host))
			continue
		}
		s.received.Add(int64(len(batch)))
		s.mu.Lock()
		var out []Finding
		for _, sum := range batch {
			out = append(out, s.c.Add(sum)...)
		}
		s.mu.Unlock()
		for _, f := range out {
			s.onFinding(f)
		}
	}
}

// Standing are the findings that stand now.
func (s *Server) Standing() []Finding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Standing()
}

// Received counts the summaries read from the job's processes.
func (s *Server) Received() int64 { return s.received.Load() }

// Dropped counts the summaries the judge dropped (Collector.Dropped).
func (s *Server) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Dropped()
}

// EnvAddr is the variable that points a job's processes at the collector
// (host:port); without it nothing is sent.
const EnvAddr = "COLLBENCH_WATCH"
