// Package watch is the judging half of collbench watch: it joins the
// summaries each rank of a running job sends of its collectives (one per
// rank and operation, from NCCL's profiler inside the job) by communicator
// and operation number, and names a rank that is persistently later than
// its peers: which rank, host and GPU, by how much, since which operation,
// with the evidence. It holds bounded state whatever the job does: a
// communicator's operations waiting for their last ranks, and the
// communicators it follows, are capped, and what does not fit is dropped
// and counted, never waited for.
package watch

import (
	"collbench/internal/words"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Summary is one rank's account of one operation: when NCCL was handed it
// and when the rank's kernel started and ended, on the rank's host clock
// (the GPU's timer aligned to it, within ErrNS).
type Summary struct {
	Comm  uint64 // the communicator's hash
	Seq   uint64 // the operation's number on the communicator
	Ranks int    // the communicator's size
	Rank  int
	Host  string
	GPU   string // the GPU's PCI bus id
	// Func is the collective's name (AllReduce, AllGather, ...) where the
	// sender knows it. A rank's lateness is judged among the operations
	// of one function: a GPU slowed by another program's work starts late
	// the collective that follows its compute, while the collectives
	// queued right behind that one start together on every rank.
	Func string `json:",omitempty"`
	// DType and Count are the element type (NCCL's name: ncclFloat32) and
	// the count the collective was called with, where the sender knows
	// them: what the job issues, for collbench tune --from.
	DType string `json:",omitempty"`
	Count int64  `json:",omitempty"`
	// IssueNS is when the rank handed NCCL the operation; StartNS and
	// EndNS bound its kernel; ErrNS is the alignment's error.
	IssueNS, StartNS, EndNS, ErrNS int64
	// Kernel is set where StartNS and EndNS are the kernel's on the GPU's
	// own timer (moved by one offset, so EndNS-StartNS is exact whatever
	// the alignment's error): the plugin's summaries. Where every rank
	// waits for every other (AllReduce, AllGather, ReduceScatter), the
	// kernels end together, so the rank that started last ran shortest,
	// and the judge reads lateness from the durations, without clocks.
	Kernel bool `json:",omitempty"`
	// Every is the sample the sender sent at (the operations whose number
	// is a multiple of it), where it sent only some: set by EnvEvery, or
	// doubled while the collector fell behind.
	Every uint64 `json:",omitempty"`
	// Clock names the host clock the times are on (the host's boot id):
	// ranks on clocks of different names are compared only where both
	// know their offset from the collector's clock (Synced), since a skew
	// between hosts' clocks would pass for lateness.
	Clock string `json:",omitempty"`
	// Synced is set when the sender measured its clock's offset from the
	// collector's: a time plus OffsetNS is on the collector's clock,
	// within OffsetErrNS.
	Synced      bool  `json:",omitempty"`
	OffsetNS    int64 `json:",omitempty"`
	OffsetErrNS int64 `json:",omitempty"`
	// Links are what the rank sent each peer in the operation, where its
	// sender measures it (a sample of the operations may carry them).
	Links []Link `json:",omitempty"`
	// NVLink is the rank's GPU's NVLink reading, on the summaries that
	// carry one (a few a second of each process).
	NVLink *NVLinkSample `json:",omitempty"`
}

// Sink takes the summary of each operation a rank runs: a Sender, or a
// test's recorder. A backend that is watched is given one.
type Sink interface{ Send(Summary) }

// Options bound what the collector holds and set when it names a rank.
type Options struct {
	// Window is how many of a rank's last operations are judged; a rank
	// is named when it was the late one in at least Share of them, and
	// cleared when that falls below Share/2.
	Window int
	Share  float64
	// Persist is how long, in the job's own time (its operations' start
	// times on the rank's clock), a rank or link must stay late or slow
	// before it is named: from the operation at which Share of its window
	// was first bad, without falling below Share/2 since. A burst shorter
	// than that is not a slow part (a clean job on 2x H200 had one GPU's
	// allreduces start 700 µs late for about 100 ms every few seconds).
	Persist time.Duration
	// MinLate is the least lateness that counts, beyond the clocks'
	// errors: well past scheduling noise. MinIssueLate is the least that
	// counts for a rank that issued late as well: processes that meet
	// only in their collectives issue apart by hundreds of microseconds
	// with nothing wrong (a clean 4-GPU PyTorch job on 4x H200: one rank
	// or another last by 68-316 us in 24 of 32 operations at a time).
	MinLate, MinIssueLate time.Duration
	// MaxPending is how many consecutive operations of one communicator
	// may wait for their last ranks (a window by operation number);
	// MaxComms how many communicators are followed.
	MaxPending, MaxComms int
	// A link (one rank's sends to one peer) is slow in an operation when
	// its rate on the wire is below LinkShare of the operation's median
	// link's, among the links that moved at least MinLinkBytes; it is
	// named and cleared by Window and Share as a rank is. MaxLinks bounds
	// the links followed, all communicators' together.
	LinkShare    float64
	MinLinkBytes int64
	MaxLinks     int
	// A GPU's NVLink reading goes beyond the job's when what its links
	// carried one way exceeds NVLinkMargin times the job's bound of it by
	// MinForeignBps or more; a GPU is named and cleared by Share of its
	// last NVLinkWindow readings and Persist, as a rank is. MaxGPUs bounds
	// the GPUs followed.
	NVLinkWindow  int
	NVLinkMargin  float64
	MinForeignBps float64
	MaxGPUs       int
}

// DefaultOptions judge the last 32 operations, name a rank late in 75% of
// them by at least 50 µs (1 ms where it issued late) and a link slower than
// half the median link in 75% of those it moved 64 KiB or more in, once
// that has held for 2 s, and
// hold at most 256 operations in flight per communicator, 4,096
// communicators and 65,536 links (a link's window is about 1 KiB); and
// name a GPU whose NVLinks carried 5 GB/s or more beyond 1.5 times the
// job's bound one way in 75% of its last 8 readings (2 s at 4 a second).
func DefaultOptions() Options {
	return Options{Window: 32, Share: 0.75, Persist: 2 * time.Second, MinLate: 50 * time.Microsecond, MinIssueLate: time.Millisecond, MaxPending: 256, MaxComms: 4096,
		LinkShare: 0.5, MinLinkBytes: MinLinkBytesDefault, MaxLinks: 1 << 16, NVLinkWindow: 8, NVLinkMargin: 1.5, MinForeignBps: 5e9, MaxGPUs: 1 << 16}
}

// Cause says what made a rank late.
type Cause string

// The causes: the rank handed NCCL its operations late (its host or its
// process is slow: a busy CPU, a slow data loader), or on time while its
// GPU started the kernel late (the GPU is shared, throttled or busy with
// other work).
const (
	CauseIssue Cause = "issued late"
	CauseGPU   Cause = "its GPU started the kernel late"
	CauseLink  Cause = "sends slowly"
	CauseEnd   Cause = "every link to and from it is slow"
	// CauseNVLink: a GPU whose NVLinks carry traffic that the job's NCCL
	// operations do not account for (another program's, or the job's own
	// moved outside NCCL).
	CauseNVLink Cause = "its NVLinks carry traffic beyond the job's NCCL operations"
)

// Finding is a rank persistently later than its peers on a communicator.
type Finding struct {
	Comm       uint64
	Rank       int
	Host, GPU  string
	Cause      Cause
	By         time.Duration // median lateness over the late operations judged
	Late, Of   int           // late in Late of its last Of operations
	Func       string        // of that function, where the senders name it
	SinceSeq   uint64        // the first operation of the late run
	Cleared    bool          // it stopped being late (a finding that ended)
	ClearedSeq uint64
	// Link is set where the finding is of a slow link from Rank: Late of
	// Of are then its slow operations.
	Link *LinkFinding
	// Dropped and Missed are the rank's evidence of what was not judged:
	// its summaries dropped on the communicator, and the operations left
	// unjudged without its summary, when it was named.
	Dropped, Missed int64
	// SharesGPU are the communicator's other ranks that run on the same
	// GPU (host and bus id) as a rank whose GPU started late: their
	// kernels take turns on it, the likeliest cause.
	SharesGPU []int
	// NVLink is set where the finding is of a GPU (Host, GPU) whose
	// NVLinks carry traffic beyond the job's: Late of Of are then its
	// readings that did. Comm and Rank are those of a process on it.
	NVLink *NVLinkFinding
}

// String is the finding as collbench watch prints it.
func (f Finding) String() string {
	if f.Link != nil {
		return f.linkString()
	}
	if f.NVLink != nil {
		return f.nvlinkString()
	}
	where := fmt.Sprintf("rank %d (%s)", f.Rank, f.Host)
	if f.GPU != "" {
		where = fmt.Sprintf("rank %d (%s, GPU %s)", f.Rank, f.Host, f.GPU)
	}
	if f.Cleared {
		return fmt.Sprintf("cleared: %s on communicator %016x is no longer late, from operation %d", where, f.Comm, f.ClearedSeq)
	}
	ops := "operations"
	if f.Func != "" {
		ops = f.Func + " operations"
	}
	s := fmt.Sprintf("%s on communicator %016x: %s, %s after its peers at the median, in %d of its last %d %s, since operation %d",
		where, f.Comm, f.Cause, f.By.Round(time.Microsecond), f.Late, f.Of, ops, f.SinceSeq)
	if len(f.SharesGPU) > 0 {
		s += fmt.Sprintf("; %s of this communicator %s on the same GPU: their kernels take turns on it", rankWords(f.SharesGPU), plural(len(f.SharesGPU), "runs", "run"))
	}
	return s
}

// rankWords is "rank 3" or "ranks 0, 1, 2".
func rankWords(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + words.Ints(rs)
}

// plural is one for a count of one, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// outcome is one rank's part in one judged operation.
type outcome struct {
	seq   uint64
	late  bool
	by    int64 // ns after the next latest rank's start
	issue bool  // its issue was late too (CauseIssue)
}

// slot is one operation in a communicator's window: the ranks that have
// reported it, until every one has and it is judged.
type slot struct {
	seq    uint64
	got    []*Summary // nil once judged
	n      int
	judged bool
}

// comm is what the collector holds of one communicator.
type comm struct {
	ranks int
	// window holds the operations base to base+MaxPending-1, the one of
	// number q in window[q%MaxPending]. It moves on as newer operations
	// come: the ones it leaves are dropped, and so are summaries of
	// operations before it. A window by number, not by arrival, keeps a
	// process whose whole batch comes after another's from pushing out
	// the operations the other just opened.
	window []slot
	base   uint64
	who    []*Summary
	funcs  []*history // a history per function, at most MaxFuncs
	named  []*Finding // per rank, the standing finding
	links  map[linkKey]*linkState
	// drops counts each rank's summaries dropped, missed the operations
	// the window left unjudged without its summary: whose summaries are
	// lost, or whose process is behind.
	drops, missed []int64
}

// history is the last Window outcomes of each rank in the operations of
// one function.
type history struct {
	fn      string
	hist    [][]outcome
	pending []onset // per rank
}

// onset is when a verdict that would name began to hold (on is false
// while none holds), and where the bad run it found had begun.
type onset struct {
	at    int64
	since uint64
	on    bool
}

// MaxFuncs bounds the functions a communicator's ranks are judged in
// apart; operations of further functions share one history.
const MaxFuncs = 16

// history is the history of fn's operations on cm.
func (cm *comm) history(fn string) *history {
	if len(cm.funcs) >= MaxFuncs {
		fn = "" // further functions: judged together
	}
	for _, h := range cm.funcs {
		if h.fn == fn {
			return h
		}
	}
	h := &history{fn: fn, hist: make([][]outcome, cm.ranks), pending: make([]onset, cm.ranks)}
	cm.funcs = append(cm.funcs, h)
	return h
}

// Collector joins summaries and judges them. Its methods are not safe for
// concurrent use; collbench watch feeds it from one goroutine.
type Collector struct {
	o       Options
	comms   map[uint64]*comm
	dropped int64
	judged  int64
	linked  int64  // link measurements judged
	linksIn int64  // link measurements received
	nlinks  int    // links followed, every communicator's
	every   uint64 // the largest sample a sender sent at
	// ops counts what the job issued, by communicator, function, type and
	// count, from each communicator's rank 0 (at most MaxOps of them).
	ops map[OpKey]uint64
	// gpus are the GPUs whose NVLink readings came (hostGPUs: the same
	// by host, where a GPU's peers are looked for); nvReadings counts the
	// intervals judged, nvSpans the GPUs not judged (a communicator across
	// hosts), nvUnread the first reason a GPU could not be read.
	gpus       map[gpuKey]*gpuTraffic
	hostGPUs   map[string][]*gpuTraffic
	nvReadings int64
	nvSpans    int
	nvUnread   string
}

// Judged is how many operations were judged: every rank of the
// communicator reported them.
func (c *Collector) Judged() int64 { return c.judged }

// LinksReceived is how many link measurements came in summaries, judged
// or not.
func (c *Collector) LinksReceived() int64 { return c.linksIn }

// LinksJudged is how many link measurements were judged: one link's
// sends in one operation, compared with the operation's other links.
func (c *Collector) LinksJudged() int64 { return c.linked }

// SampledEvery is the largest sample a sender sent at (0 or 1: every
// operation).
func (c *Collector) SampledEvery() uint64 { return c.every }

// Communicators is how many communicators the collector follows.
func (c *Collector) Communicators() int { return len(c.comms) }

// New returns a collector with o (zero fields take DefaultOptions').
func New(o Options) *Collector {
	d := DefaultOptions()
	if o.Window <= 0 {
		o.Window = d.Window
	}
	if o.Share <= 0 || o.Share > 1 {
		o.Share = d.Share
	}
	if o.Persist <= 0 {
		o.Persist = d.Persist
	}
	if o.MinLate <= 0 {
		o.MinLate = d.MinLate
	}
	if o.MinIssueLate <= 0 {
		o.MinIssueLate = d.MinIssueLate
	}
	if o.MaxPending <= 0 {
		o.MaxPending = d.MaxPending
	}
	if o.MaxComms <= 0 {
		o.MaxComms = d.MaxComms
	}
	if o.LinkShare <= 0 || o.LinkShare >= 1 {
		o.LinkShare = d.LinkShare
	}
	if o.MinLinkBytes <= 0 {
		o.MinLinkBytes = d.MinLinkBytes
	}
	if o.MaxLinks <= 0 {
		o.MaxLinks = d.MaxLinks
	}
	if o.NVLinkWindow <= 0 {
		o.NVLinkWindow = d.NVLinkWindow
	}
	if o.NVLinkMargin < 1 {
		o.NVLinkMargin = d.NVLinkMargin
	}
	if o.MinForeignBps <= 0 {
		o.MinForeignBps = d.MinForeignBps
	}
	if o.MaxGPUs <= 0 {
		o.MaxGPUs = d.MaxGPUs
	}
	return &Collector{o: o, comms: map[uint64]*comm{}, gpus: map[gpuKey]*gpuTraffic{}, hostGPUs: map[string][]*gpuTraffic{}}
}

// Dropped is how many summaries were dropped: malformed, for a
// communicator beyond MaxComms, or of operations that waited for their last
// ranks while MaxPending newer ones came.
func (c *Collector) Dropped() int64 { return c.dropped }

// Add takes one summary and returns what changed: a rank, link or GPU
// newly named, or one named cleared.
func (c *Collector) Add(s Summary) []Finding {
	if s.NVLink != nil {
		return append(c.addNVLink(s), c.add(s)...)
	}
	return c.add(s)
}

// add takes one summary's operation.
func (c *Collector) add(s Summary) []Finding {
	c.linksIn += int64(len(s.Links))
	c.every = max(c.every, s.Every)
	if s.Ranks < 2 || s.Rank < 0 || s.Rank >= s.Ranks {
		c.dropped++
		return nil
	}
	c.countOp(s)
	cm := c.comms[s.Comm]
	if cm == nil {
		if len(c.comms) >= c.o.MaxComms {
			c.dropped++
			return nil
		}
		// The window starts with this operation at its end, open to the
		// earlier ones other ranks may still send.
		w := uint64(c.o.MaxPending) //nolint:gosec // G115: a positive bound
		cm = &comm{ranks: s.Ranks, window: make([]slot, w), base: s.Seq - min(s.Seq, w-1), who: make([]*Summary, s.Ranks),
			named: make([]*Finding, s.Ranks), links: map[linkKey]*linkState{}, drops: make([]int64, s.Ranks), missed: make([]int64, s.Ranks)}
		c.comms[s.Comm] = cm
	}
	if s.Ranks != cm.ranks || s.Seq < cm.base {
		c.dropped++ // a size that changed, or an operation the window has left
		if s.Ranks == cm.ranks {
			cm.drops[s.Rank]++
		}
		return nil
	}
	w := uint64(len(cm.window)) //nolint:gosec // G115: a positive bound
	if s.Seq >= cm.base+w {
		// Move on: the operations left behind will not complete in time.
		to := s.Seq - w + 1
		for q := cm.base; q < to && q < cm.base+w; q++ {
			if sl := &cm.window[q%w]; sl.seq == q && !sl.judged && sl.got != nil {
				c.dropped += int64(sl.n)
				for r, got := range sl.got {
					if got != nil {
						cm.drops[r]++
					} else {
						cm.missed[r]++
					}
				}
			}
		}
		cm.base = to
	}
	p := &cm.window[s.Seq%w]
	if p.seq != s.Seq || (p.got == nil && !p.judged) {
		*p = slot{seq: s.Seq, got: make([]*Summary, cm.ranks)}
	}
	if p.judged || p.got[s.Rank] != nil {
		c.dropped++ // judged already, or a second summary of one rank
		cm.drops[s.Rank]++
		return nil
	}
	sc := s
	p.got[s.Rank] = &sc
	p.n++
	cm.who[s.Rank] = &sc
	if p.n < cm.ranks {
		return nil
	}
	got := p.got
	p.got, p.judged = nil, true
	c.judged++
	return append(c.judge(s.Comm, cm, s.Seq, got), c.judgeLinks(s.Comm, cm, s.Seq, got)...)
}

// update names rank r when it was late in Share of a full window of fh's
// operations for Persist up to now (the time of r's operation just
// judged), and clears it when that falls below half of Share in the
// function that named it.
func (c *Collector) update(id uint64, cm *comm, fh *history, r int, now int64) *Finding {
	if named := cm.named[r]; named != nil && named.Func != fh.fn {
		return nil // named in another function: that one clears it
	}
	h := fh.hist[r]
	var late int
	var bys []int64
	issued := 0
	for _, o := range h {
		if o.late {
			late++
			bys = append(bys, o.by)
			if o.issue {
				issued++
			}
		}
	}
	p := &fh.pending[r]
	name, clear := c.verdict(cm.named[r] != nil, late, len(h), p, now, func() uint64 { return since(h) })
	switch named := cm.named[r]; {
	case name:
		slices.Sort(bys)
		who := cm.who[r]
		f := &Finding{Comm: id, Rank: r, Host: who.Host, GPU: who.GPU, Cause: CauseGPU, By: time.Duration(bys[len(bys)/2]),
			Late: late, Of: len(h), Func: fh.fn, SinceSeq: p.since, Dropped: cm.drops[r], Missed: cm.missed[r]}
		if issued*2 > late {
			f.Cause = CauseIssue
		}
		if f.Cause == CauseGPU && who.GPU != "" {
			for q, o := range cm.who {
				if q != r && o != nil && o.Host == who.Host && strings.EqualFold(o.GPU, who.GPU) {
					f.SharesGPU = append(f.SharesGPU, q)
				}
			}
		}
		cm.named[r] = f
		return f
	case clear:
		cm.named[r] = nil
		f := *named
		f.Cleared, f.ClearedSeq = true, h[len(h)-1].seq
		return &f
	}
	return nil
}

// verdict says, of a history of n outcomes of which bad were late or
// slow, whether it names what it judges or, where that stands named,
// clears it (below half of Share for Persist). It names once a full window has had
// Share of it bad for Persist up to now, never below half of Share
// meanwhile; p holds when that began and, from run, where the bad run
// then held had begun (the finding's since).
func (c *Collector) verdict(named bool, bad, n int, p *onset, now int64, run func() uint64) (name, clear bool) {
	return c.verdictOf(named, bad, n, c.o.Window, p, now, run)
}

// verdictOf is verdict over a window of window outcomes.
func (c *Collector) verdictOf(named bool, bad, n, window int, p *onset, now int64, run func() uint64) (name, clear bool) {
	share := float64(bad) / float64(n)
	if named {
		// Cleared as it was named: once below half of Share for Persist,
		// never back to it meanwhile. A finding stands while its cause
		// lasts (4x H200: a rank named, then cleared 0.1 s later while the
		// copy loop on its GPU ran on).
		if share >= c.o.Share/2 {
			p.on = false
			return false, false
		}
		return false, p.held(now, c.o.Persist, func() uint64 { return 0 })
	}
	if share < c.o.Share/2 {
		p.on = false
		return false, false
	}
	if n < window || share < c.o.Share {
		return false, false
	}
	return p.held(now, c.o.Persist, run), false
}

// held starts p at now (where the run began: since) unless it is on, and
// says whether it has been on for persist up to now; once it says so, p
// is off again.
func (p *onset) held(now int64, persist time.Duration, since func() uint64) bool {
	if !p.on {
		*p = onset{at: now, since: since(), on: true}
	}
	if now-p.at < persist.Nanoseconds() {
		return false
	}
	p.on = false
	return true
}

// since is the first operation of the late run: the start of the longest
// run of outcomes, ending now, that holds no two on-time operations in a
// row.
func since(h []outcome) uint64 {
	return runStart(h, func(o outcome) (bool, uint64) { return o.late, o.seq })
}

// runStart is where the run of h's bad outcomes that ends now began: the
// longest run, ending with the newest, that holds no two good ones in a
// row. at says of one outcome whether it was bad, and its operation.
func runStart[T any](h []T, at func(T) (bool, uint64)) uint64 {
	_, first := at(h[len(h)-1])
	for i := len(h) - 1; i >= 0; i-- {
		bad, seq := at(h[i])
		if bad {
			first = seq
			continue
		}
		if prev, _ := at(h[max(i-1, 0)]); i > 0 && !prev {
			break
		}
	}
	return first
}

// Standing are the findings that stand now, by communicator and rank.
func (c *Collector) Standing() []Finding {
	var out []Finding
	for _, cm := range c.comms {
		for _, f := range cm.named {
			if f != nil {
				out = append(out, *f)
			}
		}
		out = append(out, cm.standingLinks()...)
	}
	out = append(out, c.standingGPUs()...)
	peer := func(f Finding) int {
		if f.NVLink != nil {
			return -3 // a GPU's traffic first
		}
		if f.Link == nil {
			return -2 // a rank's own finding first, then all its links, then each
		}
		return f.Link.Peer
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Comm != out[b].Comm {
			return out[a].Comm < out[b].Comm
		}
		if out[a].Rank != out[b].Rank {
			return out[a].Rank < out[b].Rank
		}
		return peer(out[a]) < peer(out[b])
	})
	return out
}
