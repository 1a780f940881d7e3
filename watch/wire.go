package watch

import (
	"context"
	"encoding/binary"
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
	framePing      = 'P' // the sender's clock (8 bytes): the collector answers at once
	framePong      = 'Q' // the ping's 8 bytes, then the collector's clock (8 bytes)
	proofLabel     = "collbench watch"
	frameLimit     = 4 << 20
	// handshakeWait bounds every step of the handshake, both sides.
	handshakeWait = 5 * time.Second
	// A sender measures its clock's offset from the collector's in
	// syncRounds pings (the one with the shortest round trip counts),
	// each answered within pongWait, when it connects and every syncEvery.
	syncRounds = 8
	pongWait   = 500 * time.Millisecond
	syncEvery  = 10 * time.Second
)

// hello is what a process says of itself: where it runs, and the library
// it watches (SenderOptions.Library).
type hello struct {
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Proof   []byte `json:"proof"`
	Library string `json:"library,omitempty"`
}

// SenderOptions configure a Sender.
type SenderOptions struct {
	Addr string // the collector, host:port
	Key  []byte // the job secret
	Host string
	PID  int
	// Library names what the process watches, as it found it loaded (the
	// plugin: "NCCL 2.30.7 (path), profiler interface v5"): the collector
	// counts each, so a record says which library the job ran.
	Library string
	// Warn receives one line, once, when the collector cannot be reached
	// or refuses this process; after it the sender is silent.
	Warn func(string)
	// Queue bounds the summaries waiting to be sent (default 65,536);
	// Flush is how often a batch goes (default 100 ms).
	Queue int
	Flush time.Duration
	// Now reads the clock the process's summaries are on, in ns (default:
	// time.Now().UnixNano()); the sender measures that clock's offset
	// from the collector's, so ranks on different hosts can be compared.
	Now func() int64
	// Every sends only the operations whose number is a multiple of it
	// (EnvEvery; 0 and 1: every operation). The others are not sent, and
	// not counted as dropped.
	Every int
}

// Sender sends a process's summaries to the collector without ever making
// the job wait: Send only queues, and drops (and counts) what the queue
// cannot hold; a collector that is gone, slow or refusing costs the job
// nothing but the dropped summaries.
type Sender struct {
	o  SenderOptions
	ch chan Summary
	// every: the operations sent are the multiples of it, Every doubled
	// each time a write to the collector is slow and halved after
	// paceBack of quick ones; a power of two times Every on every process,
	// so the operations all of them send are judged whatever each chose
	// (a collector that falls behind samples, it does not go blind).
	every   atomic.Uint64
	quick   time.Time // the loop's: since when writes have been quick
	clock   func() time.Time
	dropped atomic.Int64
	sent    atomic.Int64
	warned  sync.Once
	cancel  context.CancelFunc
	closing chan struct{} // closed by Close: send what is queued, then stop
	closed  sync.Once
	done    chan struct{}
	flushes chan chan struct{} // Flush's requests: send what is queued now, then close the channel
}

// flushWait bounds how long Close spends sending what is queued.
const flushWait = time.Second

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
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixNano() }
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sender{o: o, ch: make(chan Summary, o.Queue), cancel: cancel, closing: make(chan struct{}), done: make(chan struct{}),
		flushes: make(chan chan struct{}), clock: time.Now}
	s.every.Store(uint64(max(o.Every, 1))) //nolint:gosec // G115: positive
	go s.loop(ctx)
	return s
}

// Send queues one summary, or drops it when the queue is full; it never
// blocks.
func (s *Sender) Send(sum Summary) {
	if n := s.every.Load(); n > 1 {
		if sum.Seq%n != 0 {
			return // not in the sample
		}
		sum.Every = n
	}
	select {
	case s.ch <- sum:
	default:
		s.dropped.Add(1)
	}
}

// Every is the sample the sender sends now: the operations whose number
// is a multiple of it.
func (s *Sender) Every() uint64 { return s.every.Load() }

// maxBehind bounds how far a sender samples on its own beyond Every;
// paceBack is how long writes must stay quick before it halves its
// sample again.
const (
	maxBehind = 1024
	paceBack  = 30 * time.Second
)

// pace doubles the sample after a slow or failed write (the collector
// falls behind: more batches would only queue and be dropped whole, and
// every operation would go unjudged) and halves it after paceBack of
// quick writes.
func (s *Sender) pace(slow, quick bool) {
	base := uint64(max(s.o.Every, 1)) //nolint:gosec // G115: positive
	n := s.every.Load()
	switch {
	case slow:
		if n < base*maxBehind {
			s.every.Store(n * 2)
		}
		s.quick = time.Time{}
	case quick && n > base:
		if s.quick.IsZero() {
			s.quick = s.clock()
		} else if s.clock().Sub(s.quick) >= paceBack {
			s.every.Store(n / 2)
			s.quick = s.clock()
		}
	case !quick:
		s.quick = time.Time{}
	}
}

// Dropped and Sent count the summaries dropped and written so far.
func (s *Sender) Dropped() int64 { return s.dropped.Load() }

// Sent counts the summaries written to the collector.
func (s *Sender) Sent() int64 { return s.sent.Load() }

// Close sends what is queued and stops the sender: a process that ends
// loses none of its last summaries to a collector that is connected, and
// waits about flushWait at most for one that is slow or gone (a
// collector not connected to is not waited for).
func (s *Sender) Close() {
	s.closed.Do(func() { close(s.closing) })
	t := time.NewTimer(flushWait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.cancel()
		<-s.done
	}
}

// Flush sends what is queued now to the collector the sender is connected
// to, and returns once it is written or after about flushWait (at once
// where none is connected); the sender goes on. A communicator that ends
// flushes, so that a process ending right after loses nothing.
func (s *Sender) Flush() {
	t := time.NewTimer(flushWait)
	defer t.Stop()
	ack := make(chan struct{})
	select {
	case s.flushes <- ack:
	case <-s.done:
		return
	case <-t.C:
		return
	}
	select {
	case <-ack:
	case <-s.done:
	case <-t.C:
	}
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
	var clk clock
	first, last := true, false
	for {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-s.closing:
				last = true
			case ack := <-s.flushes:
				// Now, with the clock's offset as it stands: what is queued
				// goes where a collector is connected.
				batch = s.drain(batch)
				if conn != nil && len(batch) > 0 {
					if err := s.write(conn, clk, batch, flushWait); err != nil {
						_ = conn.Close()
						conn, retry = nil, time.Now().Add(30*time.Second)
					}
					batch = batch[:0]
				}
				close(ack)
				continue
			case <-tick.C:
			}
		}
		first = false // the first pass connects at once: a collector that is not there is said at the start
		batch = s.drain(batch)
		if last {
			s.flush(conn, clk, batch)
			return
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
				conn, clk = c, clock{}
			}
		}
		if conn != nil && clk.due() {
			if err := clk.measure(conn, s.o.Now); err != nil {
				s.dropped.Add(int64(len(batch)))
				batch = batch[:0]
				_ = conn.Close()
				conn, retry = nil, time.Now().Add(30*time.Second)
				continue
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
		if err := s.write(conn, clk, batch, time.Second); err != nil {
			// Gone or too slow: drop the batch and connect again later.
			_ = conn.Close()
			conn, retry = nil, time.Now().Add(30*time.Second)
		}
		batch = batch[:0]
	}
}

// drain adds what is queued to batch, up to the queue's length.
func (s *Sender) drain(batch []Summary) []Summary {
	for len(s.ch) > 0 && len(batch) < s.o.Queue {
		batch = append(batch, <-s.ch)
	}
	return batch
}

// flush is the last pass of a closing sender: what is queued goes to
// the collector it is connected to, within flushWait, or is dropped.
func (s *Sender) flush(conn net.Conn, clk clock, batch []Summary) {
	if conn == nil {
		s.dropped.Add(int64(len(batch)))
		return
	}
	if len(batch) > 0 {
		_ = s.write(conn, clk, batch, flushWait)
	}
}

// write sends one batch, with the clock's offset where it was measured,
// within wait; what was not written is counted as dropped.
func (s *Sender) write(conn net.Conn, clk clock, batch []Summary, wait time.Duration) error {
	if clk.synced {
		for i := range batch {
			batch[i].Synced, batch[i].OffsetNS, batch[i].OffsetErrNS = true, clk.off, clk.err
		}
	}
	frames, tooBig := frameBatches(batch)
	s.dropped.Add(int64(tooBig))
	_ = conn.SetWriteDeadline(time.Now().Add(wait))
	start := time.Now()
	for i, f := range frames {
		if err := bootstrap.WriteFrame(conn, frameBatch, f.payload); err != nil {
			for _, rest := range frames[i:] {
				s.dropped.Add(int64(rest.n))
			}
			s.pace(true, false)
			return err
		}
		s.sent.Add(int64(f.n))
	}
	took := time.Since(start)
	s.pace(took > wait/2, took < wait/20)
	return nil
}

// batchFrame is one frame of a batch: its JSON and how many summaries.
type batchFrame struct {
	payload []byte
	n       int
}

// frameBatches encodes batch as frames the collector reads (each within
// frameLimit, halved until it fits: a full queue is many times that, and
// the collector dropped the connection of a frame beyond it); tooBig
// counts summaries that do not fit a frame alone.
func frameBatches(batch []Summary) (frames []batchFrame, tooBig int) {
	if len(batch) == 0 {
		return nil, 0
	}
	payload, err := json.Marshal(batch)
	switch {
	case err == nil && len(payload) <= frameLimit:
		return []batchFrame{{payload, len(batch)}}, 0
	case len(batch) == 1:
		return nil, 1
	}
	a, na := frameBatches(batch[:len(batch)/2])
	b, nb := frameBatches(batch[len(batch)/2:])
	return append(a, b...), na + nb
}

// connect dials the collector and proves the job secret; ending ctx ends
// it at once, at any step.
func (s *Sender) connect(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: handshakeWait}
	c, err := d.DialContext(ctx, "tcp", s.o.Addr)
	if err != nil {
		return nil, fmt.Errorf("the collector at %s does not answer (%v)", s.o.Addr, err)
	}
	defer context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })()
	fail := func(err error) (net.Conn, error) {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(handshakeWait))
	typ, nonce, err := bootstrap.ReadFrame(c, 64)
	if err != nil || typ != frameChallenge {
		return fail(fmt.Errorf("%s is not a collbench watch collector (no challenge)", s.o.Addr))
	}
	h, _ := json.Marshal(hello{Host: s.o.Host, PID: s.o.PID, Library: s.o.Library, Proof: secret.Proof(s.o.Key, proofLabel, nonce, s.o.Host, s.o.PID)})
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
	admitted  atomic.Int64
	received  atomic.Int64
	libraries []LibraryCount // under mu: at most MaxLibraries
	maxConns  int64
	epoch     time.Time // the collector's clock: this instant, moved on monotonically
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
		return nil, fmt.Errorf("cannot listen on %s: %s", addr, bootstrap.ListenReason(err))
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
	return &Server{ln: ln, key: key, c: New(o.Judge), onFinding: o.OnFinding, onNote: o.OnNote, maxConns: int64(o.MaxConns), epoch: time.Now()}, nil
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
	s.admitted.Add(1)
	s.countLibrary(h.Library)
	_ = c.SetDeadline(time.Time{})
	for {
		typ, raw, err := bootstrap.ReadFrame(c, frameLimit)
		if err != nil {
			return
		}
		if typ == framePing {
			if len(raw) == 8 {
				pong := binary.LittleEndian.AppendUint64(append([]byte(nil), raw...), uint64(s.now())) //nolint:gosec // G115: a clock in ns since 1970 is positive
				_ = c.SetWriteDeadline(time.Now().Add(pongWait))
				if bootstrap.WriteFrame(c, framePong, pong) != nil {
					return
				}
			}
			continue
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

// now reads the collector's clock in ns: wall-clock time at the start,
// moved on by the monotonic clock, so no step of the wall clock shows.
func (s *Server) now() int64 { return s.epoch.UnixNano() + time.Since(s.epoch).Nanoseconds() }

// Received counts the summaries read from the job's processes.
func (s *Server) Received() int64 { return s.received.Load() }

// Dropped counts the summaries the judge dropped (Collector.Dropped).
func (s *Server) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Dropped()
}

// Counts says what the collector has taken in so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{Processes: s.admitted.Load(), Summaries: s.received.Load(), Dropped: s.c.Dropped(),
		Operations: s.c.Judged(), Links: s.c.LinksJudged(), LinksIn: s.c.LinksReceived(), Communicators: s.c.Communicators(),
		Behind: s.c.Behind(MaxBehind), Every: s.c.SampledEvery(), Ops: s.c.Ops(), Libraries: append([]LibraryCount(nil), s.libraries...),
		NVLink: s.c.NVLinkCounts()}
}

// clock is a sender's measure of its clock's offset from the collector's.
type clock struct {
	synced, none bool // measured; the collector does not answer pings
	off, err     int64
	at           time.Time
}

// due says whether the offset is to be measured (again).
func (k *clock) due() bool { return !k.none && (!k.synced || time.Since(k.at) > syncEvery) }

// measure pings the collector syncRounds times and keeps the round with
// the shortest trip: the collector read its clock between the sender's
// two readings, so the offset is within half the trip of the midpoint. A
// collector that never answers (one from before pings) is left unsynced;
// one that stops answering keeps its last offset until the next period.
// An error is the connection's.
func (k *clock) measure(c net.Conn, now func() int64) error {
	best := int64(-1)
	var off int64
	for range syncRounds {
		t0 := now()
		_ = c.SetDeadline(time.Now().Add(pongWait))
		if err := bootstrap.WriteFrame(c, framePing, binary.LittleEndian.AppendUint64(nil, uint64(t0))); err != nil { //nolint:gosec // G115: the bits of t0 go and come back unchanged
			return err
		}
		typ, raw, err := bootstrap.ReadFrame(c, 64)
		t1 := now()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && best < 0 {
			// No answer: a collector from before pings when it never
			// answered; else a slow moment, measured again next period
			// (a late answer is told from the next one by its echo).
			k.none = !k.synced
			k.at = time.Now()
			_ = c.SetDeadline(time.Time{})
			return nil
		}
		if err != nil {
			return err
		}
		if typ != framePong || len(raw) != 16 || int64(binary.LittleEndian.Uint64(raw)) != t0 { //nolint:gosec // G115: see above
			continue
		}
		tc := int64(binary.LittleEndian.Uint64(raw[8:])) //nolint:gosec // G115: the collector's clock in ns since 1970
		if trip := t1 - t0; trip >= 0 && (best < 0 || trip < best) {
			best, off = trip, tc-(t0+t1)/2
		}
	}
	_ = c.SetDeadline(time.Time{})
	if best >= 0 {
		k.synced, k.off, k.err, k.at = true, off, (best+1)/2, time.Now()
	}
	return nil
}
