package watch

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// job is a modelled training job: ranks issue each collective about every
// stepNS, with jitter; a delay (planted from an operation on, on one rank)
// is added to when its host issues (host) or when its GPU starts the
// kernel (gpu).
type job struct {
	ranks   int
	rng     *rand.Rand
	jitter  int64 // ns, uniform
	errNS   int64
	delayed map[int]plant
	funcs   []string           // operation seq is of funcs[seq % len(funcs)]; none: unnamed
	gpu     func(r int) string // each rank's GPU; nil: its own, by local rank
}

type plant struct {
	from, to uint64 // operations [from, to)
	by       int64  // ns
	host     bool   // the host issues late (else the GPU starts late)
	every    int    // only every k-th operation (1: all)
	burst    uint64 // late only in the first burst of every period operations (0: all)
	period   uint64
}

// opNS is how far apart the models' operations are.
const opNS = 10_000_000

// persistOps is how many operations the models run in the default
// Persist.
func persistOps() uint64 { return uint64(DefaultOptions().Persist.Nanoseconds() / opNS) } //nolint:gosec // G115: positive

func (j *job) op(comm uint64, seq uint64) []Summary {
	base := int64(seq) * opNS //nolint:gosec // G115: a test's operation numbers are small
	var out []Summary
	for r := 0; r < j.ranks; r++ {
		issue := base + j.rng.Int63n(j.jitter+1)
		start := issue + 5_000 + j.rng.Int63n(j.jitter+1)
		if p, ok := j.delayed[r]; ok && seq >= p.from && seq < p.to && (p.every <= 1 || seq%uint64(p.every) == 0) && //nolint:gosec // G115: every is small and positive
			(p.burst == 0 || (seq-p.from)%p.period < p.burst) {
			if p.host {
				issue += p.by
			}
			start += p.by
		}
		fn := ""
		if len(j.funcs) > 0 {
			fn = j.funcs[seq%uint64(len(j.funcs))]
		}
		gpu := "0000:0" + string(rune('0'+r%8)) + ":00.0"
		if j.gpu != nil {
			gpu = j.gpu(r)
		}
		out = append(out, Summary{Comm: comm, Seq: seq, Ranks: j.ranks, Rank: r, Host: "node" + string(rune('a'+r/8)), GPU: gpu,
			Func: fn, IssueNS: issue, StartNS: start, EndNS: start + 1_000_000, ErrNS: j.errNS})
	}
	return out
}

// run feeds ops [0, n) of comm in a shuffled rank order per operation,
// and returns every change with the operation it came at.
func run(c *Collector, j *job, comm uint64, n uint64) (changes []Finding, at []uint64) {
	for seq := uint64(1); seq <= n; seq++ {
		ss := j.op(comm, seq)
		j.rng.Shuffle(len(ss), func(a, b int) { ss[a], ss[b] = ss[b], ss[a] })
		for _, s := range ss {
			for _, f := range c.Add(s) {
				changes = append(changes, f)
				at = append(at, seq)
			}
		}
	}
	return changes, at
}

// TestCleanJobRaisesNothing: 2,000 operations of 8 ranks whose starts
// jitter by 40 µs (within the 50 µs floor and the clocks' error) name
// nobody.
func TestCleanJobRaisesNothing(t *testing.T) {
	c := New(DefaultOptions())
	j := &job{ranks: 8, rng: rand.New(rand.NewSource(1)), jitter: 40_000, errNS: 5_000} //nolint:gosec // G404: a seeded model
	if ch, _ := run(c, j, 0xabc, 2000); len(ch) > 0 {
		t.Errorf("a clean job raised %v", ch)
	}
	if c.Dropped() != 0 || c.Judged() != 2000 || c.Communicators() != 1 {
		t.Errorf("%d dropped, %d operations judged on %d communicators; want 0, 2000 on 1", c.Dropped(), c.Judged(), c.Communicators())
	}
}

// TestLateRankNamedAtEveryPlace: a rank delayed by 2 ms from operation
// 500 is named within a window of operations, with its host and GPU, the
// cause (its host issued late, or its GPU started late), and since when;
// and cleared once the delay ends. Planted on the first, a middle and the
// last rank.
func TestLateRankNamedAtEveryPlace(t *testing.T) {
	const window = 32
	if DefaultOptions().Window != window {
		t.Fatalf("the default window is %d; this test plants for %d", DefaultOptions().Window, window)
	}
	for _, r := range []int{0, 5, 15} {
		for _, host := range []bool{true, false} {
			c := New(DefaultOptions())
			j := &job{ranks: 16, rng: rand.New(rand.NewSource(int64(r))), jitter: 30_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
				delayed: map[int]plant{r: {from: 500, to: 900, by: 2_000_000, host: host}}}
			ch, at := run(c, j, 7, 1200)
			if len(ch) != 2 {
				t.Fatalf("rank %d (host %v): changes %v", r, host, ch)
			}
			f := ch[0]
			want := CauseGPU
			if host {
				want = CauseIssue
			}
			if f.Rank != r || f.Cleared || f.Cause != want || at[0] < 500+window*3/4-1+persistOps() || at[0] > 500+window+persistOps() || f.SinceSeq < 500 || f.SinceSeq > 510 {
				t.Errorf("rank %d (host %v): %v at operation %d", r, host, f, at[0])
			}
			if f.By < 1900*time.Microsecond || f.By > 2100*time.Microsecond {
				t.Errorf("rank %d: late by %v, planted 2 ms", r, f.By)
			}
			if !strings.Contains(f.String(), "node"+string(rune('a'+r/8))) || !strings.Contains(f.String(), "since operation") {
				t.Errorf("finding says %q", f)
			}
			// Cleared as named: once under half the share for Persist.
			if !ch[1].Cleared || ch[1].Rank != r || at[1] < 900+persistOps() || at[1] > 900+window+persistOps() {
				t.Errorf("rank %d: cleared %v at %d", r, ch[1], at[1])
			}
		}
	}
}

// TestFindingSaysRanksShareItsGPU: where ranks of one communicator run on
// one GPU (a job placed two processes on it: 2 ranks sharing an H200 were
// named in turn, each "its GPU started the kernel late"), a rank whose GPU
// starts late is named with the ranks it shares the GPU with, first, in
// the middle and last; a rank on a GPU of its own is named without, and
// so is a rank that issues late.
func TestFindingSaysRanksShareItsGPU(t *testing.T) {
	for _, tc := range []struct {
		late  int
		host  bool
		share []int
	}{{0, false, []int{1}}, {5, false, []int{4}}, {7, false, []int{6}}, {2, false, nil}, {5, true, nil}} {
		// Ranks 0-1, 4-5 and 6-7 of node a share a GPU each; 2 and 3 have their own.
		gpus := []string{"0000:10:00.0", "0000:10:00.0", "0000:20:00.0", "0000:30:00.0", "0000:40:00.0", "0000:40:00.0", "0000:50:00.0", "0000:50:00.0"}
		c := New(DefaultOptions())
		j := &job{ranks: 8, rng: rand.New(rand.NewSource(int64(tc.late))), jitter: 30_000, errNS: 5_000, gpu: func(r int) string { return gpus[r] }, //nolint:gosec // G404: a seeded model
			delayed: map[int]plant{tc.late: {from: 100, to: 400, by: 2_000_000, host: tc.host}}}
		ch, _ := run(c, j, 9, 420)
		if len(ch) == 0 || ch[0].Rank != tc.late {
			t.Fatalf("rank %d late: changes %v", tc.late, ch)
		}
		f := ch[0]
		if !slices.Equal(f.SharesGPU, tc.share) {
			t.Errorf("rank %d late (host %v): shares its GPU with %v, want %v", tc.late, tc.host, f.SharesGPU, tc.share)
		}
		if said := strings.Contains(f.String(), "on the same GPU: their kernels take turns"); said != (tc.share != nil) {
			t.Errorf("rank %d late: %q", tc.late, f)
		}
		if own := strings.Contains(f.Confirm(), "GPUs of their own"); own != (tc.share != nil) {
			t.Errorf("rank %d late: to confirm %q", tc.late, f.Confirm())
		}
	}
}

// TestHostIssueJitterIsNotNamed: processes that meet only in their
// collectives issue apart by hundreds of microseconds with nothing wrong
// (seen in a clean PyTorch job on 4x H200: one rank last by 68-316 us in 24
// of 32 operations at a time). A rank that issues 300 us late in every
// operation is below the issue floor and not named, at the first, a middle
// and the last rank; the same lateness on a GPU that starts late, the
// host having issued on time, is named. The collector is made as collbench
// watch's server makes it, from zero options.
func TestHostIssueJitterIsNotNamed(t *testing.T) {
	for _, r := range []int{0, 2, 3} {
		for _, host := range []bool{true, false} {
			c := New(Options{})
			j := &job{ranks: 4, rng: rand.New(rand.NewSource(int64(r))), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
				delayed: map[int]plant{r: {from: 1, to: 5000, by: 300_000, host: host}}}
			ch, _ := run(c, j, 5, 2000)
			switch {
			case host && len(ch) > 0:
				t.Errorf("rank %d issuing 300 us late: named %v", r, ch)
			case !host && (len(ch) == 0 || ch[0].Rank != r || ch[0].Cause != CauseGPU):
				t.Errorf("rank %d whose GPU starts 300 us late: %v", r, ch)
			}
		}
	}
}

// TestOccasionalLatenessIsNotNamed: a rank late in one operation of five
// (a periodic checkpoint, say) is below the share and never named.
func TestOccasionalLatenessIsNotNamed(t *testing.T) {
	c := New(DefaultOptions())
	j := &job{ranks: 4, rng: rand.New(rand.NewSource(3)), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
		delayed: map[int]plant{2: {from: 1, to: 5000, by: 3_000_000, host: true, every: 5}}}
	if ch, _ := run(c, j, 1, 3000); len(ch) > 0 {
		t.Errorf("named %v", ch)
	}
}

// TestLateInOneFunctionIsNamed: a training step's allreduce follows its
// compute, and its allgather and broadcast are queued right behind it, so
// a GPU that another program slows starts the allreduce late and the
// other two on time with its peers (seen on 2x H200: a copy loop on one GPU
// left it late in one operation of three, below the share, and it was not
// named). Judged within each function, it is named in its allreduces, and
// cleared once they start on time again: with 2 and 4 ranks, at the first
// and the last rank. Operations whose senders do not name the function
// are judged together, as before: the same plant is then not named.
func TestLateInOneFunctionIsNamed(t *testing.T) {
	const window = 32
	steps := []string{"AllReduce", "AllGather", "Broadcast"}
	span := uint64(3 * window) // a window of one function's operations
	for _, ranks := range []int{2, 4} {
		for _, r := range []int{0, ranks - 1} {
			j := &job{ranks: ranks, rng: rand.New(rand.NewSource(int64(ranks*10 + r))), jitter: 20_000, errNS: 5_000, funcs: steps, //nolint:gosec // G404: a seeded model
				delayed: map[int]plant{r: {from: 300, to: 900, by: 2_000_000, every: len(steps)}}}
			ch, at := run(New(DefaultOptions()), j, 3, 1200)
			if len(ch) != 2 {
				t.Fatalf("%d ranks, rank %d late in its allreduces: changes %v", ranks, r, ch)
			}
			f := ch[0]
			if f.Rank != r || f.Cleared || f.Cause != CauseGPU || f.Func != "AllReduce" || at[0] > 300+span+persistOps() {
				t.Errorf("%d ranks: %v at operation %d; want rank %d named in its AllReduce operations", ranks, f, at[0], r)
			}
			if !strings.Contains(f.String(), "of its last 32 AllReduce operations") {
				t.Errorf("finding says %q", f)
			}
			if !ch[1].Cleared || ch[1].Rank != r || at[1] < 900+persistOps() || at[1] > 900+span+persistOps() {
				t.Errorf("%d ranks: cleared %v at %d", ranks, ch[1], at[1])
			}
			j.funcs, j.rng = nil, rand.New(rand.NewSource(1)) //nolint:gosec // G404: a seeded model
			if ch, _ := run(New(DefaultOptions()), j, 3, 1200); len(ch) > 0 {
				t.Errorf("%d ranks, functions unnamed: named %v", ranks, ch)
			}
		}
	}
}

// TestShortBurstsAreNotNamed: a clean 2-GPU PyTorch job on 2x H200 had
// one GPU's allreduces start about 700 µs late in bursts of about 100 ms,
// a few seconds apart. Each burst fills 75% of the window of 32 and then
// ends; such a rank is not named, as each burst is shorter than Persist
// (here bursts of 0.5 s every 3 s, at the first and the last rank). A
// collector that names at once (Persist 1 ns) does name it: the bursts
// are what the default holds back.
func TestShortBurstsAreNotNamed(t *testing.T) {
	for _, r := range []int{0, 1} {
		j := func() *job {
			return &job{ranks: 2, rng: rand.New(rand.NewSource(int64(40 + r))), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
				delayed: map[int]plant{r: {from: 100, to: 1 << 40, by: 700_000, burst: 50, period: 300}}}
		}
		if ch, _ := run(New(DefaultOptions()), j(), 9, 3000); len(ch) > 0 {
			t.Errorf("rank %d late in bursts of 0.5 s: named %v", r, ch[0])
		}
		o := DefaultOptions()
		o.Persist = time.Nanosecond
		if ch, _ := run(New(o), j(), 9, 3000); len(ch) == 0 || ch[0].Rank != r {
			t.Errorf("rank %d late in bursts of 0.5 s, named at once: %v; want it named", r, ch)
		}
	}
}

// TestFunctionsAreBounded: a communicator's ranks are judged in at most
// MaxFuncs functions apart; operations of further functions share one
// history, so a sender naming a new function per operation holds the
// collector's memory bounded.
func TestFunctionsAreBounded(t *testing.T) {
	c := New(DefaultOptions())
	for seq := uint64(1); seq <= 500; seq++ {
		for r := 0; r < 2; r++ {
			c.Add(Summary{Comm: 1, Seq: seq, Ranks: 2, Rank: r, Func: "f" + strings.Repeat("x", int(seq%100)), StartNS: int64(seq) * 1000}) //nolint:gosec // G115: small
		}
	}
	if n := len(c.comms[1].funcs); n != MaxFuncs+1 {
		t.Errorf("%d histories held; want at most %d functions and one shared", n, MaxFuncs)
	}
}

// TestBoundedWhenRanksGoQuiet: a rank that stops sending (its process
// gone, its summaries dropped) leaves every later operation incomplete:
// the collector holds at most MaxPending of them, counts what it drops,
// and names nobody.
func TestBoundedWhenRanksGoQuiet(t *testing.T) {
	o := DefaultOptions()
	c := New(o)
	j := &job{ranks: 4, rng: rand.New(rand.NewSource(4)), jitter: 20_000, errNS: 5_000} //nolint:gosec // G404: a seeded model
	for seq := uint64(1); seq <= 5000; seq++ {
		for _, s := range j.op(9, seq) {
			if s.Rank == 3 && seq > 100 {
				continue
			}
			if ch := c.Add(s); len(ch) > 0 {
				t.Fatalf("named %v", ch)
			}
		}
	}
	if n := c.comms[9].held(); n > o.MaxPending {
		t.Errorf("%d operations held, at most %d", n, o.MaxPending)
	}
	if want := int64(3 * (4900 - o.MaxPending)); c.Dropped() != want {
		t.Errorf("dropped %d, want %d", c.Dropped(), want)
	}
	// Whose: rank 3 left every dropped operation unjudged; the others'
	// summaries were the ones dropped.
	b := c.Behind(MaxBehind)
	if len(b) != 4 || b[0].Rank != 3 || b[0].Missed != int64(4900-o.MaxPending) || b[0].Dropped != 0 || b[1].Missed != 0 || b[1].Dropped != int64(4900-o.MaxPending) {
		t.Errorf("behind: %+v; want rank 3 missing from %d operations", b, 4900-o.MaxPending)
	}
	if line := (Counts{Operations: c.Judged(), Summaries: 1, Processes: 4, Communicators: 1, Dropped: c.Dropped(), Behind: b}).String(); !strings.Contains(line, "most unjudged for want of rank 3 (nodea) on communicator 0000000000000009: 4644 operations") {
		t.Errorf("counts say %q", line)
	}
	// Malformed and late summaries are dropped too, and so are
	// communicators beyond the cap.
	before := c.Dropped()
	c.Add(Summary{Comm: 9, Seq: 5, Ranks: 4, Rank: 1})    // judged long ago
	c.Add(Summary{Comm: 9, Seq: 6000, Ranks: 4, Rank: 9}) // no such rank
	c.Add(Summary{Comm: 9, Seq: 6000, Ranks: 5, Rank: 1}) // the size changed
	if c.Dropped() != before+3 {
		t.Errorf("dropped %d more, want 3", c.Dropped()-before)
	}
	small := New(Options{MaxComms: 2})
	for id := uint64(0); id < 5; id++ {
		small.Add(Summary{Comm: id, Seq: 1, Ranks: 2, Rank: 0})
	}
	if len(small.comms) != 2 || small.Dropped() != 3 {
		t.Errorf("%d communicators held, %d dropped", len(small.comms), small.Dropped())
	}
}

// TestBatchesOfOneRankAfterAnother: each process sends its summaries in
// batches, and one process's batch can come whole before another's. Four
// ranks whose 600 operations each come in one batch, one rank after
// another, still have the last MaxPending operations judged (the first
// rank's batch pushed the ones before out of the window); ranks whose
// batches of 100 come a quarter of a batch apart have all 3,000 judged
// and none dropped.
func TestBatchesOfOneRankAfterAnother(t *testing.T) {
	for _, tc := range []struct {
		ops, batch, lag int
		judged, dropped int64
	}{
		{600, 600, 600, 256, 4 * (600 - 256)},
		{3000, 100, 25, 3000, 0},
	} {
		c := New(DefaultOptions())
		j := &job{ranks: 4, rng: rand.New(rand.NewSource(11)), jitter: 20_000, errNS: 5_000} //nolint:gosec // G404: a seeded model
		byRank := make([][]Summary, 4)
		for seq := 1; seq <= tc.ops; seq++ {
			for _, s := range j.op(3, uint64(seq)) { //nolint:gosec // G115: a positive count
				byRank[s.Rank] = append(byRank[s.Rank], s)
			}
		}
		// At step k, rank r sends what it has up to operation k*batch -
		// r*lag.
		for k := 1; k*tc.batch-3*tc.lag <= tc.ops+tc.batch; k++ {
			for r := range byRank {
				for len(byRank[r]) > 0 && int(byRank[r][0].Seq) <= k*tc.batch-r*tc.lag { //nolint:gosec // G115: small numbers
					if ch := c.Add(byRank[r][0]); len(ch) > 0 {
						t.Fatalf("named %v", ch)
					}
					byRank[r] = byRank[r][1:]
				}
			}
		}
		if c.Judged() != tc.judged || c.Dropped() != tc.dropped {
			t.Errorf("batches of %d, %d apart: %d judged, %d dropped; want %d and %d", tc.batch, tc.lag, c.Judged(), c.Dropped(), tc.judged, tc.dropped)
		}
	}
}

// TestClocksOfDifferentHostsAreNotCompared: a host whose clock runs 5 ms
// ahead of the others' (its ranks look late in every operation) is not
// named: ranks on clocks of different names are not compared.
func TestClocksOfDifferentHostsAreNotCompared(t *testing.T) {
	c := New(DefaultOptions())
	j := &job{ranks: 4, rng: rand.New(rand.NewSource(8)), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
		delayed: map[int]plant{3: {from: 1, to: 1 << 40, by: 5_000_000, host: true}}}
	for seq := uint64(1); seq <= 300; seq++ {
		for _, s := range j.op(5, seq) {
			s.Clock = "boot-a"
			if s.Rank == 3 {
				s.Clock = "boot-b"
			}
			if ch := c.Add(s); len(ch) > 0 {
				t.Fatalf("a skewed clock named %v", ch)
			}
		}
	}
}

// TestLateInOneCommunicator: a rank late on one communicator (its
// tensor-parallel group, say) is named there only.
func TestLateInOneCommunicator(t *testing.T) {
	c := New(DefaultOptions())
	late := &job{ranks: 4, rng: rand.New(rand.NewSource(5)), jitter: 20_000, errNS: 5_000, //nolint:gosec // G404: a seeded model
		delayed: map[int]plant{1: {from: 1, to: 1 << 40, by: 1_000_000}}}
	clean := &job{ranks: 4, rng: rand.New(rand.NewSource(6)), jitter: 20_000, errNS: 5_000} //nolint:gosec // G404: a seeded model
	run(c, late, 100, 400)
	run(c, clean, 200, 400)
	st := c.Standing()
	if len(st) != 1 || st[0].Comm != 100 || st[0].Rank != 1 {
		t.Errorf("standing %v", st)
	}
}

// held is how many operations wait for their last ranks.
func (cm *comm) held() int {
	n := 0
	for i := range cm.window {
		if sl := &cm.window[i]; sl.seq >= cm.base && sl.got != nil {
			n++
		}
	}
	return n
}

// slicedOp is one allreduce of a training step on 4 GPUs, as the plugin
// places it: every rank's kernel starts about 1 ms after its issue (the
// step's compute is queued ahead of it), rank v's 2 ms later still (its
// GPU is time-sliced with another program), and every kernel ends 300 µs
// after the last start (each rank waits for every other). Each rank's GPU
// timer is aligned to its host's clock at the middle of bounds that open
// from its issue: so the victim's placed times are 1.5 ms early with an
// error of 1.5 ms, its peers' 0.5 ms early with 0.5 ms.
func slicedOp(rng *rand.Rand, seq uint64, v int, kernel bool) []Summary {
	base := int64(seq) * opNS //nolint:gosec // G115: small
	starts := make([]int64, 4)
	last := int64(0)
	for r := range starts {
		starts[r] = base + 1_000_000 + rng.Int63n(40_000)
		if r == v {
			starts[r] += 2_000_000
		}
		last = max(last, starts[r])
	}
	var out []Summary
	for r, st := range starts {
		shift, errNS := int64(500_000), int64(500_000)
		if r == v {
			shift, errNS = 1_500_000, 1_500_000
		}
		out = append(out, Summary{Comm: 5, Seq: seq, Ranks: 4, Rank: r, GPU: "0000:0" + string(rune('0'+r)) + ":00.0", Func: "AllReduce",
			IssueNS: base + rng.Int63n(20_000), StartNS: st - shift, EndNS: last + 300_000 - shift, ErrNS: errNS, Kernel: kernel})
	}
	return out
}

// TestTimeSlicedGPUNamedByDurations: a GPU time-sliced with another
// program starts each allreduce 2 ms after its peers; its timer's
// alignment is as wide as its kernels are held back, so judged by starts
// it is never late beyond the errors (the miss seen on 4x H200), while
// judged by the kernels' durations (the plugin's summaries) it is named,
// at every rank, by about 2 ms, as its GPU's. The same job clean names
// nobody.
func TestTimeSlicedGPUNamedByDurations(t *testing.T) {
	for v := -1; v < 4; v++ {
		for _, kernel := range []bool{false, true} {
			c := New(DefaultOptions())
			rng := rand.New(rand.NewSource(int64(v + 10))) //nolint:gosec // G404: a seeded model
			var named []Finding
			for seq := uint64(1); seq <= 600; seq++ {
				for _, s := range slicedOp(rng, seq, v, kernel) {
					named = append(named, c.Add(s)...)
				}
			}
			switch {
			case v < 0 || !kernel:
				if len(named) > 0 {
					t.Errorf("victim %d, kernel times %v: named %v", v, kernel, named)
				}
			case len(named) != 1 || named[0].Rank != v || named[0].Cause != CauseGPU || named[0].By < 1900*time.Microsecond || named[0].By > 2100*time.Microsecond:
				t.Errorf("GPU %d time-sliced: named %v", v, named)
			}
		}
	}
}

// TestFindingSaysWhatWasNotJudged: a time-sliced GPU whose process also
// loses one summary in ten is named with that evidence: the operations
// left unjudged without its summary, counted when it was named.
func TestFindingSaysWhatWasNotJudged(t *testing.T) {
	o := DefaultOptions()
	o.MaxPending = 8
	c := New(o)
	rng := rand.New(rand.NewSource(3)) //nolint:gosec // G404: a seeded model
	var named []Finding
	for seq := uint64(1); seq <= 900; seq++ {
		for _, s := range slicedOp(rng, seq, 1, true) {
			if s.Rank == 1 && seq%10 == 0 {
				continue
			}
			named = append(named, c.Add(s)...)
		}
	}
	if len(named) != 1 || named[0].Rank != 1 || named[0].Missed < 20 || named[0].Dropped != 0 {
		t.Fatalf("named %+v; want rank 1 with the operations it left unjudged", named)
	}
	if r := recorded(named[0], time.Unix(0, 0)); r.Missed != named[0].Missed {
		t.Errorf("recorded %+v", r)
	}
}
