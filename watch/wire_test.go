package watch

import (
	"collbench/bootstrap"
	"context"
	"math/rand"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// collector starts a Server on loopback with key and returns it with what
// it reported.
func collector(t *testing.T, key string) (*Server, func() ([]Finding, []string)) {
	t.Helper()
	var mu sync.Mutex
	var fs []Finding
	var notes []string
	s, err := Listen("127.0.0.1:0", []byte(key), ServerOptions{
		OnFinding: func(f Finding) { mu.Lock(); fs = append(fs, f); mu.Unlock() },
		OnNote:    func(n string) { mu.Lock(); notes = append(notes, n); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, func() ([]Finding, []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]Finding(nil), fs...), append([]string(nil), notes...)
	}
}

// warnings collects a sender's one line.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) add(s string) { w.mu.Lock(); w.lines = append(w.lines, s); w.mu.Unlock() }
func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("no %s within 10 s", what)
}

// TestSendersToCollector: four processes of a job (two ranks each) send
// their summaries over loopback with the job secret; a rank whose host
// issues 2 ms late from operation 100 is named by the collector, with its
// host. Planted on a rank of the first and of the last process.
func TestSendersToCollector(t *testing.T) {
	for _, late := range []int{1, 6} {
		s, got := collector(t, "s3cret")
		var senders []*Sender
		for p := 0; p < 4; p++ {
			senders = append(senders, NewSender(SenderOptions{Addr: s.Addr(), Key: []byte("s3cret"), Host: "node" + string(rune('a'+p)), PID: 100 + p, Flush: 5 * time.Millisecond}))
		}
		j := &job{ranks: 8, rng: rand.New(rand.NewSource(int64(late))), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
			delayed: map[int]plant{late: {from: 100, to: 1 << 40, by: 2_000_000, host: true}}}
		for seq := uint64(1); seq <= 400; seq++ {
			for _, sum := range j.op(42, seq) {
				sum.Host = "node" + string(rune('a'+sum.Rank/2))
				senders[sum.Rank/2].Send(sum)
			}
			time.Sleep(200 * time.Microsecond)
		}
		waitFor(t, "finding", func() bool { fs, _ := got(); return len(fs) > 0 })
		fs, notes := got()
		if fs[0].Rank != late || fs[0].Host != "node"+string(rune('a'+late/2)) || fs[0].Cause != CauseIssue {
			t.Errorf("late rank %d: %v (notes %q)", late, fs, notes)
		}
		if st := s.Standing(); len(st) != 1 || st[0].Rank != late || s.Dropped() != 0 {
			t.Errorf("standing %v, %d dropped", st, s.Dropped())
		}
		for _, sn := range senders {
			sn.Close()
			if sn.Dropped() != 0 {
				t.Errorf("a sender dropped %d summaries with the collector up", sn.Dropped())
			}
		}
	}
}

// TestSendersOnTwoHostsClocks: two hosts whose clocks are 50 ms apart
// (the second runs ahead) send through their own senders; each measures
// its offset from the collector's clock, so a rank whose GPU starts 2 ms
// late is named on either host, and a clean job names nobody. Without
// the offsets the two hosts' ranks are never compared.
func TestSendersOnTwoHostsClocks(t *testing.T) {
	const ahead = int64(50_000_000)
	for _, late := range []int{-1, 1, 5} {
		s, got := collector(t, "s3cret")
		hosts := []string{"nodea", "nodeb"}
		var senders []*Sender
		for h := range hosts {
			skew := int64(h) * ahead
			senders = append(senders, NewSender(SenderOptions{Addr: s.Addr(), Key: []byte("s3cret"), Host: hosts[h], PID: 10 + h,
				Flush: 5 * time.Millisecond, Now: func() int64 { return time.Now().UnixNano() + skew }}))
		}
		j := &job{ranks: 8, rng: rand.New(rand.NewSource(int64(late + 10))), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
			delayed: map[int]plant{}}
		if late >= 0 {
			j.delayed[late] = plant{from: 20, to: 1 << 40, by: 2_000_000}
		}
		const ops = 300
		for seq := uint64(1); seq <= ops; seq++ {
			for _, sum := range j.op(7, seq) {
				h := sum.Rank / 4
				sum.Host, sum.Clock = hosts[h], hosts[h]
				sum.IssueNS += int64(h) * ahead
				sum.StartNS += int64(h) * ahead
				sum.EndNS += int64(h) * ahead
				senders[h].Send(sum)
			}
			time.Sleep(200 * time.Microsecond)
		}
		if late >= 0 {
			waitFor(t, "finding", func() bool { fs, _ := got(); return len(fs) > 0 })
		} else {
			// Every summary in and every operation judged: the counts
			// are the evidence behind a clean job's silence.
			waitFor(t, "every operation judged", func() bool { return s.Counts().Operations == ops })
			if c := s.Counts(); !reflect.DeepEqual(c, Counts{Processes: 2, Summaries: 8 * ops, Operations: ops, Communicators: 1}) {
				t.Errorf("clean job: counts %+v", c)
			}
		}
		fs, notes := got()
		switch {
		case late < 0 && len(fs) > 0:
			t.Errorf("clean job: named %v", fs)
		case late >= 0 && (len(fs) == 0 || fs[0].Rank != late || fs[0].Cause != CauseGPU || fs[0].Host != hosts[late/4]):
			t.Errorf("rank %d planted late: %v (notes %q)", late, fs, notes)
		}
		for _, sn := range senders {
			sn.Close()
		}
	}
}

// TestWrongSecretAndNoCollector: a process with the wrong secret is
// refused (the collector notes it, the process says it once), and a
// collector that does not answer costs one line; in both, Send never
// blocks and every summary is dropped and counted.
func TestWrongSecretAndNoCollector(t *testing.T) {
	s, got := collector(t, "right")
	var w warnings
	bad := NewSender(SenderOptions{Addr: s.Addr(), Key: []byte("wrong"), Host: "nodex", PID: 7, Warn: w.add, Flush: 5 * time.Millisecond})
	waitFor(t, "refusal", func() bool { return len(w.all()) > 0 })
	for i := uint64(1); i <= 100_000; i++ {
		bad.Send(Summary{Comm: 1, Seq: i, Ranks: 2})
	}
	bad.Close()
	_, notes := got()
	if lines := w.all(); len(lines) != 1 || !strings.Contains(lines[0], "refused this process: wrong job secret") || !strings.Contains(lines[0], "the job runs on") {
		t.Errorf("the process said %q", lines)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "refused pid 7 on nodex") {
		t.Errorf("the collector noted %q", notes)
	}
	if bad.Sent() != 0 || bad.Dropped() == 0 {
		t.Errorf("sent %d, dropped %d", bad.Sent(), bad.Dropped())
	}

	var w2 warnings
	gone := NewSender(SenderOptions{Addr: "127.0.0.1:1", Key: []byte("k"), Warn: w2.add, Flush: 5 * time.Millisecond, Queue: 16})
	waitFor(t, "warning", func() bool { return len(w2.all()) > 0 })
	for i := 0; i < 1000; i++ {
		gone.Send(Summary{})
	}
	gone.Close()
	if lines := w2.all(); len(lines) != 1 || !strings.Contains(lines[0], "does not answer") {
		t.Errorf("said %q", lines)
	}
	if gone.Dropped() < 1000-16 {
		t.Errorf("dropped %d of 1000 with no collector", gone.Dropped())
	}
}

// TestCollectorKilledMidRun: the collector goes away; the sender keeps
// taking summaries without blocking and counts them as dropped.
func TestCollectorKilledMidRun(t *testing.T) {
	s, err := Listen("127.0.0.1:0", []byte("k"), ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	sn := NewSender(SenderOptions{Addr: s.Addr(), Key: []byte("k"), Flush: 5 * time.Millisecond})
	defer sn.Close()
	for i := uint64(1); i <= 100; i++ {
		sn.Send(Summary{Comm: 1, Seq: i, Ranks: 2, Rank: 0})
	}
	waitFor(t, "sent summaries", func() bool { return sn.Sent() == 100 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := uint64(1000); i < 11_000; i++ {
		sn.Send(Summary{Comm: 1, Seq: i, Ranks: 2, Rank: 0})
	}
	waitFor(t, "drops", func() bool { return sn.Dropped() > 0 })
	if sn.Sent() > 100+int64(10_000) {
		t.Errorf("sent %d", sn.Sent())
	}
}

// TestListenWithoutSecret: a collector without a job secret is refused
// at once, saying how to give one.
func TestListenWithoutSecret(t *testing.T) {
	if _, err := Listen("127.0.0.1:0", nil, ServerOptions{}); err == nil || !strings.Contains(err.Error(), "COLLBENCH_TOKEN") {
		t.Errorf("%v", err)
	}
}

// TestCloseSendsWhatIsQueued: a process that ends closes its sender; the
// summaries still queued reach the collector (the sender would not have
// flushed them for an hour), and a collector that never answers the
// handshake holds Close up about flushWait, not the handshake's 5 s.
func TestCloseSendsWhatIsQueued(t *testing.T) {
	s, _ := collector(t, "k")
	sn := NewSender(SenderOptions{Addr: s.Addr(), Key: []byte("k"), Flush: time.Hour})
	waitFor(t, "the sender admitted", func() bool { return s.Counts().Processes == 1 })
	for i := uint64(1); i <= 500; i++ {
		sn.Send(Summary{Comm: 1, Seq: i, Ranks: 2, Rank: 0})
	}
	sn.Close()
	if sn.Sent() != 500 || sn.Dropped() != 0 {
		t.Errorf("closed with 500 queued: sent %d, dropped %d", sn.Sent(), sn.Dropped())
	}
	waitFor(t, "every summary", func() bool { return s.Received() == 500 })

	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, and says nothing
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		var held []net.Conn // open and silent until the test ends
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	stuck := NewSender(SenderOptions{Addr: mute.Addr().String(), Key: []byte("k"), Flush: time.Hour})
	stuck.Send(Summary{Comm: 1, Seq: 1, Ranks: 2, Rank: 0})
	time.Sleep(50 * time.Millisecond) // inside its handshake
	start := time.Now()
	stuck.Close()
	if took := time.Since(start); took > flushWait+time.Second {
		t.Errorf("Close took %v with a collector that never answers", took)
	}
}

// TestFlushSendsWhatIsQueued: a sender whose own flush never comes (an
// hour) sends what is queued when Flush is called, goes on sending, and
// a Flush with no collector connected returns at once.
func TestFlushSendsWhatIsQueued(t *testing.T) {
	s, _ := collector(t, "k")
	sn := NewSender(SenderOptions{Addr: s.Addr(), Key: []byte("k"), Flush: time.Hour})
	defer sn.Close()
	waitFor(t, "the sender admitted", func() bool { return s.Counts().Processes == 1 })
	for round, n := range []uint64{300, 200} {
		for i := uint64(1); i <= n; i++ {
			sn.Send(Summary{Comm: 1, Seq: uint64(round)*1000 + i, Ranks: 2, Rank: 0}) //nolint:gosec // G115: small
		}
		sn.Flush()
		want := int64(300)
		if round == 1 {
			want = 500
		}
		if sn.Sent() != want || sn.Dropped() != 0 {
			t.Errorf("round %d: flushed with %d queued: sent %d in all, dropped %d", round, n, sn.Sent(), sn.Dropped())
		}
		waitFor(t, "every summary", func() bool { return s.Received() == want })
	}

	alone := NewSender(SenderOptions{Addr: "127.0.0.1:1", Key: []byte("k"), Flush: time.Hour})
	defer alone.Close()
	alone.Send(Summary{Comm: 1, Seq: 1, Ranks: 2, Rank: 0})
	time.Sleep(50 * time.Millisecond) // its first pass has failed to connect
	start := time.Now()
	alone.Flush()
	// Half of flushWait (1 s), what a Flush that waited would take: a
	// margin a loaded 2-core machine's scheduling does not cross.
	if took := time.Since(start); took > flushWait/2 {
		t.Errorf("Flush with no collector took %v", took)
	}
}

// TestSenderSamplesWhileTheCollectorFallsBehind: each slow write doubles
// the sample (powers of two times Every, up to maxBehind times it), a
// sampled sender sends only the multiples and says at what sample, and
// after paceBack of quick writes it halves it again, back to Every.
func TestSenderSamplesWhileTheCollectorFallsBehind(t *testing.T) {
	now := time.Unix(0, 0)
	s := &Sender{o: SenderOptions{Every: 3, Queue: 16}, ch: make(chan Summary, 16), clock: func() time.Time { return now }}
	s.every.Store(3)
	for range 3 {
		s.pace(true, false)
	}
	if s.Every() != 24 {
		t.Fatalf("after 3 slow writes: every %d, want 24", s.Every())
	}
	for q := uint64(1); q <= 48; q++ {
		s.Send(Summary{Seq: q})
	}
	if len(s.ch) != 2 {
		t.Fatalf("%d of operations 1-48 queued at every 24, want 2", len(s.ch))
	}
	if got := <-s.ch; got.Seq != 24 || got.Every != 24 {
		t.Errorf("queued %+v", got)
	}
	for range 20 {
		s.pace(true, false)
	}
	if s.Every() != 3*maxBehind {
		t.Errorf("every %d after many slow writes, want at most %d", s.Every(), 3*maxBehind)
	}
	s.every.Store(24)
	s.pace(false, true)
	now = now.Add(paceBack - time.Second)
	s.pace(false, true)
	if s.Every() != 24 {
		t.Errorf("halved before paceBack of quick writes: %d", s.Every())
	}
	s.pace(false, false) // a middling write starts the quiet again
	now = now.Add(2 * time.Second)
	s.pace(false, true)
	if s.Every() != 24 {
		t.Errorf("halved though the quick writes were interrupted: %d", s.Every())
	}
	for range 3 {
		now = now.Add(paceBack)
		s.pace(false, true)
	}
	if s.Every() != 3 {
		t.Errorf("after quick writes: every %d, want back to 3", s.Every())
	}
}

// TestSamplesOfDifferentSendersStillJudge: four ranks whose senders fell
// behind by different amounts (every 1, 2, 4 and 8 operations) still
// have every multiple of 8 judged, the others dropped and counted, and a
// rank planted late is named; the counts say the sample.
func TestSamplesOfDifferentSendersStillJudge(t *testing.T) {
	o := DefaultOptions()
	o.Persist = time.Nanosecond
	c := New(o)
	rng := rand.New(rand.NewSource(8)) //nolint:gosec // G404: a seeded model
	var named []Finding
	for seq := uint64(1); seq <= 3200; seq++ {
		for _, s := range slicedOp(rng, seq, 2, true) {
			every := uint64(1) << s.Rank
			if seq%every != 0 {
				continue
			}
			if every > 1 {
				s.Every = every
			}
			named = append(named, c.Add(s)...)
		}
	}
	if c.Judged() != 400 || len(named) != 1 || named[0].Rank != 2 || c.SampledEvery() != 8 {
		t.Fatalf("%d operations judged (want 400), sample %d, named %v", c.Judged(), c.SampledEvery(), named)
	}
	if line := (Counts{Operations: c.Judged(), Summaries: 1, Processes: 4, Communicators: 1, Every: c.SampledEvery()}).String(); !strings.Contains(line, "sampled: every 8 operations at most") {
		t.Errorf("counts say %q", line)
	}
}

// TestSenderSamplesForASlowCollector: a collector that reads a frame only
// every 0.7 s falls behind a process sending 20,000 summaries each 100 ms
// (several frames a batch: each within the collector's frame limit, which
// a full queue's one frame passed, so the collector dropped it whole); the
// sender's write stalls past half its bound and it doubles its sample.
// The collector's small receive buffer and a bound of 60 s keep it so on a
// loaded machine, where the sender makes its batches slowly (it once read
// 4 frames in 8 s there, too few to fill loopback's default buffers).
func TestSenderSamplesForASlowCollector(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var frames atomic.Int64
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(16 << 10)
		}
		_ = bootstrap.WriteFrame(c, frameChallenge, []byte("nonce"))
		if _, _, err := bootstrap.ReadFrame(c, 4096); err != nil {
			return
		}
		_ = bootstrap.WriteFrame(c, frameWelcome, nil)
		for {
			typ, _, err := bootstrap.ReadFrame(c, frameLimit)
			if err != nil {
				return
			}
			if typ == frameBatch {
				frames.Add(1)
				time.Sleep(700 * time.Millisecond)
			}
		}
	}()
	s := NewSender(SenderOptions{Addr: ln.Addr().String(), Key: []byte("k"), Host: "h", PID: 1})
	defer s.Close()
	stop := time.Now().Add(60 * time.Second) // the bound of a failure: it samples within seconds
	for seq := uint64(1); time.Now().Before(stop) && s.Every() < 2; seq++ {
		s.Send(Summary{Comm: 1, Seq: seq, Ranks: 2, Rank: 0, Host: strings.Repeat("h", 100)})
		if seq%20000 == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if s.Every() < 2 || frames.Load() == 0 {
		t.Fatalf("the sender sends every %d operations to a collector that fell behind (%d frames read)", s.Every(), frames.Load())
	}
}

// TestFullQueueGoesInFramesTheCollectorReads: a full queue (65,536
// summaries, about 14 MB of JSON) goes as frames each within the
// collector's frame limit, every summary in one of them.
func TestFullQueueGoesInFramesTheCollectorReads(t *testing.T) {
	batch := make([]Summary, 1<<16)
	for i := range batch {
		batch[i] = Summary{Comm: 1, Seq: uint64(i), Ranks: 8, Rank: 3, Host: "node-0001", GPU: "0000:18:00.0", Func: "AllReduce", IssueNS: 1, StartNS: 2, EndNS: 3, Kernel: true} //nolint:gosec // G115: small
	}
	frames, tooBig := frameBatches(batch)
	n := 0
	for _, f := range frames {
		if len(f.payload) > frameLimit {
			t.Fatalf("a frame of %d bytes, limit %d", len(f.payload), frameLimit)
		}
		n += f.n
	}
	if n != len(batch) || tooBig != 0 || len(frames) < 2 {
		t.Errorf("%d frames carry %d of %d summaries (%d too big)", len(frames), n, len(batch), tooBig)
	}
}
