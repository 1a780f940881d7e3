// Package watchdog keeps a progress record for every rank (which
// collective, size and mode, which iteration, which phase, which peer it is
// waiting for) and judges from them when a world has stopped making
// progress: which ranks are stuck and which are only waiting for them.
package watchdog

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"collbench/internal/words"
)

// DefaultTimeout is how long a world may make no progress at all before
// the watchdog stops it.
const DefaultTimeout = 5 * time.Minute

// Phase is what a rank is doing.
type Phase int32

// The phases of a rank.
const (
	Idle    Phase = iota // between operations: setup, allocation, results
	Fill                 // writing inputs for a check
	Warmup               // untimed operations
	Timed                // the timed loop
	Check                // the verification operation and the check of its output
	Barrier              // waiting for every rank of the world
	Done                 // finished
	Setup                // forming communicators or other state every rank of a group must join
)

var phaseNames = []string{"idle", "fill", "warmup", "timed", "check", "barrier", "done", "setup"}

func (p Phase) String() string {
	if p < 0 || int(p) >= len(phaseNames) {
		return fmt.Sprintf("phase(%d)", int(p))
	}
	return phaseNames[p]
}

// Values of Record.Wait besides a peer's world rank.
const (
	NotWaiting = -1
	WaitingAll = -2 // waiting for every rank of its communicator
)

// Record is one rank's progress as the judge sees it.
type Record struct {
	Rank  int    `json:"r"`
	Ops   int64  `json:"o"` // collective operations this rank has entered
	What  string `json:"w"` // e.g. "allreduce float sum 1 GiB out-of-place"
	Phase Phase  `json:"p"`
	Iter  int    `json:"i"` // iteration of the phase, from 1
	Iters int    `json:"n"`
	Wait  int    `json:"a"`
	// QuietMS is how long the record has not changed, in milliseconds.
	QuietMS int64 `json:"q"`
	// IssuingFor is set while the rank's thread is inside the library
	// issuing the operations of these world ranks as well as its own (one
	// thread issuing for several GPUs, --threads one).
	IssuingFor []int `json:"f,omitempty"`
}

// Quiet is how long the record has not changed.
func (r Record) Quiet() time.Duration { return time.Duration(r.QuietMS) * time.Millisecond }

// Tracker is one rank's live progress. Its owner updates it from the
// rank's own thread; the judge reads it from another. Updates are atomic
// and cheap enough for every iteration of a timed loop.
type Tracker struct {
	rank    int
	ops     atomic.Int64
	iter    atomic.Int32
	iters   atomic.Int32
	wait    atomic.Int32
	phase   atomic.Int32
	changed atomic.Int64 // unix nanoseconds
	what    atomic.Pointer[string]
	// issuing is the ranks whose operations this rank's thread is issuing
	// now, nil when it is not inside such a call.
	issuing atomic.Pointer[[]int]
}

// NewTracker returns an idle tracker for a world rank.
func NewTracker(rank int) *Tracker {
	t := &Tracker{rank: rank}
	t.wait.Store(NotWaiting)
	t.touch()
	return t
}

func (t *Tracker) touch() { t.changed.Store(time.Now().UnixNano()) }

// Begin enters a phase of an operation: what it is and how many
// iterations it has.
func (t *Tracker) Begin(what string, p Phase, iters int) {
	if t == nil {
		return
	}
	if cur := t.what.Load(); what != "" && (cur == nil || *cur != what) {
		t.what.Store(&what) // only a new name is stored: no allocation per call
	}
	t.phase.Store(int32(p))
	t.iter.Store(0)
	t.iters.Store(int32(min(iters, math.MaxInt32))) //nolint:gosec // G115: clamped to int32
	t.wait.Store(NotWaiting)
	t.touch()
}

// SetPhase enters a phase without changing what the rank works on.
func (t *Tracker) SetPhase(p Phase) {
	if t == nil {
		return
	}
	t.phase.Store(int32(p))
	if p == Barrier {
		t.wait.Store(WaitingAll)
	} else {
		t.wait.Store(NotWaiting)
	}
	t.touch()
}

// Op records that the rank enters its next operation, iteration i of the phase.
func (t *Tracker) Op(i int) { t.Ops(1, i) }

// Ops records n operations entered at once, the last of them iteration
// i of the phase (a loop issued in one step).
func (t *Tracker) Ops(n, i int) {
	if t == nil {
		return
	}
	t.ops.Add(int64(n))
	t.iter.Store(int32(min(i, math.MaxInt32))) //nolint:gosec // G115: clamped to int32
	t.touch()
}

// Waiting records that the rank waits for the given world rank (or
// WaitingAll, or NotWaiting when the wait is over).
func (t *Tracker) Waiting(peer int) {
	if t == nil {
		return
	}
	t.wait.Store(int32(peer)) //nolint:gosec // G115: a rank number, far below 2^31
	t.touch()
}

// Issuing records that the rank's thread enters the library to issue the
// operations of the given world ranks (its own among them) in one call,
// or, with nil, that it has left it; like Awaits, it is not progress. The
// list is the caller's, made once and never changed, so that a step
// allocates nothing.
func (t *Tracker) Issuing(ranks *[]int) {
	if t == nil {
		return
	}
	t.issuing.Store(ranks)
}

// Awaits records whom the rank now waits for (a world rank, WaitingAll or
// NotWaiting) without counting it as progress: a backend marks it around
// each wait of a step, where Waiting would cost a clock read.
func (t *Tracker) Awaits(peer int) {
	if t == nil {
		return
	}
	t.wait.Store(int32(peer)) //nolint:gosec // G115: a rank number, far below 2^31
}

// Moved records progress inside an operation (data arrived or was reduced).
func (t *Tracker) Moved() {
	if t == nil {
		return
	}
	t.touch()
}

// Snapshot returns the record as of now.
func (t *Tracker) Snapshot(now time.Time) Record {
	r := Record{Rank: t.rank, Ops: t.ops.Load(), Phase: Phase(t.phase.Load()), Iter: int(t.iter.Load()),
		Iters: int(t.iters.Load()), Wait: int(t.wait.Load())}
	if w := t.what.Load(); w != nil {
		r.What = *w
	}
	if rs := t.issuing.Load(); rs != nil {
		r.IssuingFor = *rs
	}
	r.QuietMS = max(now.Sub(time.Unix(0, t.changed.Load())).Milliseconds(), 0)
	return r
}

// Board holds the trackers of the ranks this process drives.
type Board struct {
	mu    sync.Mutex
	ranks map[int]*Tracker
}

// NewBoard returns an empty board.
func NewBoard() *Board { return &Board{ranks: map[int]*Tracker{}} }

// For returns the tracker of a world rank, creating it. A nil board gives
// a nil tracker, whose methods do nothing.
func (b *Board) For(rank int) *Tracker {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.ranks[rank]
	if !ok {
		t = NewTracker(rank)
		b.ranks[rank] = t
	}
	return t
}

// Snapshot returns every tracked rank's record, by rank.
func (b *Board) Snapshot(now time.Time) []Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Record, 0, len(b.ranks))
	for _, t := range b.ranks {
		out = append(out, t.Snapshot(now))
	}
	slices.SortFunc(out, func(a, b Record) int { return a.Rank - b.Rank })
	return out
}

// Encode returns the board's records as a heartbeat payload.
func (b *Board) Encode(now time.Time) []byte {
	out, _ := json.Marshal(b.Snapshot(now))
	return out
}

// Decode reads a heartbeat payload and ages its records by how long ago it
// arrived.
func Decode(payload []byte, age time.Duration) ([]Record, error) {
	if len(payload) == 0 {
		return nil, nil
	}
	var rs []Record
	if err := json.Unmarshal(payload, &rs); err != nil {
		return nil, err
	}
	for i := range rs {
		rs[i].QuietMS += max(age.Milliseconds(), 0)
	}
	return rs, nil
}

// Verdict names the ranks that stopped a world.
type Verdict struct {
	Stuck   []int
	Waiting []int
	Msg     string
}

// Judge decides from every rank's record whether the world has stopped:
// no rank's record changed for timeout while some rank has not finished.
// The stuck ranks are those not waiting for anyone (a rank waiting for a
// peer points at it); among several, the ones furthest behind. who names
// a rank with its host and device.
func Judge(recs []Record, timeout time.Duration, who func(rank int) string) *Verdict {
	var live []Record
	for _, r := range recs {
		if r.Phase != Done {
			live = append(live, r)
		}
	}
	if len(live) == 0 || timeout <= 0 {
		return nil
	}
	latest := live[0].Quiet()
	for _, r := range live[1:] {
		latest = min(latest, r.Quiet())
	}
	if latest < timeout {
		return nil // some rank made progress within the bound
	}
	byRank := map[int]Record{}
	for _, r := range live {
		byRank[r.Rank] = r
	}
	// A rank that others wait for but that sent no record at all (its
	// process stopped or froze before its first heartbeat said anything)
	// is the one stuck: nothing else is known of it.
	var cand []Record
	for _, r := range live {
		if _, ok := byRank[r.Wait]; r.Wait >= 0 && !ok && !slices.ContainsFunc(cand, func(c Record) bool { return c.Rank == r.Wait }) {
			byRank[r.Wait] = Record{Rank: r.Wait, Ops: -1, QuietMS: r.QuietMS}
			cand = append(cand, byRank[r.Wait])
		}
	}
	if len(cand) == 0 {
		for _, r := range live {
			if r.Wait == NotWaiting && r.Phase != Barrier {
				cand = append(cand, r)
			}
		}
	}
	if len(cand) == 0 {
		cand = chainEnd(live, byRank)
	}
	if len(cand) == 0 {
		cand = live // everyone waits for everyone: name them all
	}
	// The ranks furthest behind are stuck; the others wait for them.
	least := cand[0].Ops
	for _, r := range cand[1:] {
		least = min(least, r.Ops)
	}
	v := &Verdict{}
	var first Record
	for _, r := range cand {
		if r.Ops == least {
			if v.Stuck == nil {
				first = r
			}
			v.Stuck = append(v.Stuck, r.Rank)
		}
	}
	// A thread stuck inside the library while it issues for several GPUs
	// cannot say which of them holds it: every one of them is named.
	for _, q := range first.IssuingFor {
		if _, ok := byRank[q]; ok && !slices.Contains(v.Stuck, q) {
			v.Stuck = append(v.Stuck, q)
		}
	}
	for _, r := range live {
		if !slices.Contains(v.Stuck, r.Rank) {
			v.Waiting = append(v.Waiting, r.Rank)
		}
	}
	slices.Sort(v.Stuck)
	slices.Sort(v.Waiting)
	v.Msg = describe(v, first, who)
	return v
}

// chainEnd follows "waits for" edges from every waiting rank to the rank
// at the end of the chain; a cycle names every rank on it.
func chainEnd(live []Record, byRank map[int]Record) []Record {
	seen := map[int]bool{}
	var out []Record
	for _, start := range live {
		path := []int{}
		on := map[int]bool{}
		r := start
		for {
			if on[r.Rank] { // a cycle: its members are stuck together
				i := slices.Index(path, r.Rank)
				for _, q := range path[i:] {
					if !seen[q] {
						seen[q] = true
						out = append(out, byRank[q])
					}
				}
				break
			}
			on[r.Rank] = true
			path = append(path, r.Rank)
			next, ok := byRank[r.Wait]
			if r.Wait < 0 || !ok {
				if !seen[r.Rank] && r.Phase != Barrier {
					seen[r.Rank] = true
					out = append(out, r)
				}
				break
			}
			r = next
		}
	}
	return out
}

func describe(v *Verdict, r Record, who func(int) string) string {
	names := make([]string, len(v.Stuck))
	for i, s := range v.Stuck {
		names[i] = who(s)
	}
	subject := strings.Join(names, ", ")
	verb := "has"
	if len(v.Stuck) > 1 {
		verb = "have"
	}
	msg := fmt.Sprintf("%s %s not finished %s after %v", subject, verb, doing(r), r.Quiet().Round(time.Second))
	if r.Ops < 0 {
		msg = fmt.Sprintf("%s sent no record of its progress in %v", subject, r.Quiet().Round(time.Second))
	}
	switch len(v.Waiting) {
	case 0:
	case 1:
		msg += fmt.Sprintf("; rank %d is waiting for it", v.Waiting[0])
	default:
		msg += fmt.Sprintf("; ranks %s are waiting for it", words.Ints(v.Waiting))
	}
	if len(v.Stuck) > 1 {
		msg = strings.Replace(msg, "waiting for it", "waiting for them", 1)
	}
	if len(r.IssuingFor) > 1 {
		msg += fmt.Sprintf("; one thread, rank %d's, issues the operations of ranks %s and has not returned from the communication library",
			r.Rank, words.Ints(r.IssuingFor))
	}
	return msg
}

// doing describes what a rank was doing.
func doing(r Record) string {
	what := r.What
	if what == "" {
		what = "its operation"
	}
	switch r.Phase {
	case Fill:
		return "filling the inputs of " + what
	case Check:
		return "the check of " + what
	case Warmup:
		return fmt.Sprintf("%s warm-up iteration %d", what, r.Iter)
	case Timed:
		if r.Iters > 0 {
			return fmt.Sprintf("%s iteration %d of %d", what, r.Iter, r.Iters)
		}
		return fmt.Sprintf("%s iteration %d", what, r.Iter)
	case Barrier:
		return "the barrier after " + what
	case Setup:
		if r.What == "" {
			return "setting up"
		}
		return "setting up " + what
	case Idle:
		if r.What == "" {
			return "setting up"
		}
		return "the step after " + what
	}
	return what
}

// Watch calls records every interval and fire with the first verdict, then
// returns. It returns when ctx ends.
func Watch(ctx context.Context, interval, timeout time.Duration, records func() []Record, who func(int) string, fire func(*Verdict)) {
	if timeout <= 0 {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if v := Judge(records(), timeout, who); v != nil {
			fire(v)
			return
		}
	}
}

// Interval is how often a watchdog with the given timeout looks.
func Interval(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 100*time.Millisecond), time.Second)
}

type boardKey struct{}

// WithBoard returns a context that carries b to the backends, which mark
// on it what their ranks wait for.
func WithBoard(ctx context.Context, b *Board) context.Context {
	return context.WithValue(ctx, boardKey{}, b)
}

// BoardFrom returns the board ctx carries, or nil.
func BoardFrom(ctx context.Context) *Board {
	if ctx == nil {
		return nil
	}
	b, _ := ctx.Value(boardKey{}).(*Board)
	return b
}
