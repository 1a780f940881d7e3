// Package faults plants faults in the backends for tests and drills: a
// rank whose collective never returns, a process that dies or stops (these
// on every backend), a slow or delayed link between two ranks, a slow rank
// or host, a rank that corrupts what it sends (the CPU backend's). The
// spec comes from $COLLBENCH_FAULTS so it reaches every process a launcher
// starts. It is a testing option: never set it on a real run.
package faults

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvFaults names the variable that holds the fault spec.
const EnvFaults = "COLLBENCH_FAULTS"

// Syntax is the spec's grammar, for help texts and errors.
const Syntax = `items separated by ';':
  hang:R[@N]           rank R's Nth collective (default 1st) and every later one never return
  kill:R[@N]           rank R's process kills itself (SIGKILL) at its Nth collective (processes of their own only)
  stop:R[@N]           rank R's process stops itself (SIGSTOP) at its Nth collective (processes of their own only)
  slow-link:A-B:RATE   bytes between ranks A and B move at RATE (e.g. 20MB/s), both ways
  delay-link:A-B:DUR   every message between ranks A and B is delayed by DUR (e.g. 5ms)
  slow-rank:R:RATE     everything rank R sends, and its local copies, move at RATE
  late-rank:R:DUR      rank R's thread waits DUR before it issues each operation (a straggling host; NCCL backend, and cpu across processes)
  slow-host:H:RATE     the same for every rank on host H
  corrupt:R            rank R flips a bit in every message it sends (and in its outputs)
  probe-hang:R         rank R's algorithm probe stops answering once its world is open
  probe-exit:R         rank R's algorithm probe exits with status 3 once its world is open
  probe-drop:R         rank R's algorithm probe exits with status 3 right after asking for its first control round, before the answer`

type link struct{ a, b int }

func (l link) has(x, y int) bool { return (l.a == x && l.b == y) || (l.a == y && l.b == x) }

// Set is a parsed fault spec. The zero value and nil plant nothing.
type Set struct {
	spec      string
	hang      map[int]int64
	process   map[int]procFault
	linkRate  map[link]float64
	linkDelay map[link]time.Duration
	rankRate  map[int]float64
	rankLate  map[int]time.Duration
	hostRate  map[string]float64
	corrupt   map[int]bool
	probe     map[int]string // rank -> "hang" or "exit"
	kinds     []string       // the kinds of fault the spec names, each once, in its order
}

// Parse reads a spec (see Syntax). An empty spec gives nil.
func Parse(spec string) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := &Set{spec: spec, hang: map[int]int64{}, process: map[int]procFault{}, linkRate: map[link]float64{}, linkDelay: map[link]time.Duration{},
		rankRate: map[int]float64{}, rankLate: map[int]time.Duration{}, hostRate: map[string]float64{}, corrupt: map[int]bool{}, probe: map[int]string{}}
	for _, item := range strings.Split(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if err := s.add(item); err != nil {
			return nil, fmt.Errorf("%s: %q: %v (%s)", EnvFaults, item, err, "see docs/faults.md, testing hooks")
		}
		if kind, _, _ := strings.Cut(item, ":"); !slices.Contains(s.kinds, kind) {
			s.kinds = append(s.kinds, kind)
		}
	}
	return s, nil
}

// Unplanted returns the kinds the spec names that are not among plants
// (what a backend plants), in the spec's order: a fault that a backend
// would silently leave out makes a test pass for the wrong reason.
func (s *Set) Unplanted(plants []string) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, k := range s.kinds {
		if !slices.Contains(plants, k) {
			out = append(out, k)
		}
	}
	return out
}

// add parses one fault item of the spec (see Syntax) into the set.
func (s *Set) add(item string) error {
	f := strings.Split(item, ":")
	want := func(n int) error {
		if len(f) != n {
			return fmt.Errorf("want %d fields separated by ':'", n)
		}
		return nil
	}
	switch f[0] {
	case "hang", "kill", "stop":
		if err := want(2); err != nil {
			return err
		}
		r, n, _ := strings.Cut(f[1], "@")
		rank, err := parseRank(r)
		if err != nil {
			return err
		}
		at := int64(1)
		if n != "" {
			if at, err = strconv.ParseInt(n, 10, 64); err != nil || at < 1 {
				return fmt.Errorf("bad operation number %q", n)
			}
		}
		if f[0] == "hang" {
			s.hang[rank] = at
		} else {
			s.process[rank] = procFault{Action: f[0], At: at}
		}
	case "slow-link", "delay-link":
		if err := want(3); err != nil {
			return err
		}
		l, err := parseLink(f[1])
		if err != nil {
			return err
		}
		if f[0] == "slow-link" {
			rate, err := ParseRate(f[2])
			if err != nil {
				return err
			}
			s.linkRate[l] = rate
		} else {
			d, err := time.ParseDuration(f[2])
			if err != nil || d < 0 {
				return fmt.Errorf("bad delay %q", f[2])
			}
			s.linkDelay[l] = d
		}
	case "slow-rank":
		if err := want(3); err != nil {
			return err
		}
		r, err := parseRank(f[1])
		if err != nil {
			return err
		}
		if s.rankRate[r], err = ParseRate(f[2]); err != nil {
			return err
		}
	case "late-rank":
		if err := want(3); err != nil {
			return err
		}
		r, err := parseRank(f[1])
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(f[2])
		if err != nil || d <= 0 {
			return fmt.Errorf("bad delay %q", f[2])
		}
		s.rankLate[r] = d
	case "slow-host":
		if err := want(3); err != nil {
			return err
		}
		rate, err := ParseRate(f[2])
		if err != nil {
			return err
		}
		if f[1] == "" {
			return fmt.Errorf("no host")
		}
		s.hostRate[f[1]] = rate
	case "corrupt":
		if err := want(2); err != nil {
			return err
		}
		r, err := parseRank(f[1])
		if err != nil {
			return err
		}
		s.corrupt[r] = true
	case "probe-hang", "probe-exit", "probe-drop":
		if err := want(2); err != nil {
			return err
		}
		r, err := parseRank(f[1])
		if err != nil {
			return err
		}
		s.probe[r] = strings.TrimPrefix(f[0], "probe-")
	default:
		return fmt.Errorf("unknown fault %q", f[0])
	}
	return nil
}

// FitsWorld refuses a spec that names a rank outside a world of n ranks:
// its fault would never be planted, and the test that relies on it would
// pass for the wrong reason.
func (s *Set) FitsWorld(n int) error {
	if s == nil {
		return nil
	}
	worst := -1
	note := func(r int) { worst = max(worst, r) }
	for r := range s.hang {
		note(r)
	}
	for r := range s.process {
		note(r)
	}
	for l := range s.linkRate {
		note(max(l.a, l.b))
	}
	for l := range s.linkDelay {
		note(max(l.a, l.b))
	}
	for r := range s.rankRate {
		note(r)
	}
	for r := range s.rankLate {
		note(r)
	}
	for r := range s.corrupt {
		note(r)
	}
	for r := range s.probe {
		note(r)
	}
	if worst >= n {
		return fmt.Errorf("invalid %s=%q: rank %d is outside the world of %d ranks (ranks 0 to %d), so it would plant nothing", EnvFaults, s.spec, worst, n, n-1)
	}
	return nil
}

func parseRank(s string) (int, error) {
	r, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || r < 0 {
		return 0, fmt.Errorf("bad rank %q", s)
	}
	return r, nil
}

func parseLink(s string) (link, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return link{}, fmt.Errorf("bad link %q (want A-B)", s)
	}
	x, err := parseRank(a)
	if err != nil {
		return link{}, err
	}
	y, err := parseRank(b)
	if err != nil {
		return link{}, err
	}
	if x == y {
		return link{}, fmt.Errorf("a link joins two different ranks, got %q", s)
	}
	return link{x, y}, nil
}

// ParseRate reads a rate such as 20MB/s, 1.5GB/s or 800KB/s (decimal
// units) into bytes per second.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "/S")
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad rate %q (e.g. 20MB/s)", s)
	}
	return v * mult, nil
}

// String returns the spec as given.
func (s *Set) String() string {
	if s == nil {
		return ""
	}
	return s.spec
}

// HangAt returns the operation number from which rank's collectives never
// return, and whether one is planted.
func (s *Set) HangAt(rank int) (int64, bool) {
	if s == nil {
		return 0, false
	}
	n, ok := s.hang[rank]
	return n, ok
}

// procFault is a planted fault of a rank's whole process.
type procFault struct {
	Action string // "kill" or "stop"
	At     int64
}

// ProcessFault returns what rank's process is to do to itself ("kill" or
// "stop") once it starts its at-th collective, if anything is planted.
func (s *Set) ProcessFault(rank int) (action string, at int64) {
	if s == nil {
		return "", 0
	}
	f := s.process[rank]
	return f.Action, f.At
}

// ActOnProcess carries out rank's planted process fault, if its ops-th
// collective is where it is planted: the process kills (SIGKILL) or stops
// (SIGSTOP) itself there, as a killed or frozen process would, without a
// word to anyone. Only a rank with a process of its own may call it.
func (s *Set) ActOnProcess(rank int, ops int64) {
	action, at := s.ProcessFault(rank)
	if action == "" || ops != at {
		return
	}
	sig := syscall.SIGKILL
	if action == "stop" {
		sig = syscall.SIGSTOP
	}
	_ = syscall.Kill(os.Getpid(), sig)
}

// ProbeFault says what rank's algorithm probe is to do wrong: "hang",
// "exit" or "" (nothing).
func (s *Set) ProbeFault(rank int) string {
	if s == nil {
		return ""
	}
	return s.probe[rank]
}

// Corrupts reports whether rank corrupts what it sends.
func (s *Set) Corrupts(rank int) bool { return s != nil && s.corrupt[rank] }

// SendRate is the rate (bytes/s, 0 unlimited) of what rank from sends to
// rank to; hostOf names each rank's host.
func (s *Set) SendRate(from, to int, hostOf func(int) string) float64 {
	if s == nil {
		return 0
	}
	rate := 0.0
	lower := func(r float64) {
		if r > 0 && (rate == 0 || r < rate) {
			rate = r
		}
	}
	for l, r := range s.linkRate {
		if l.has(from, to) {
			lower(r)
		}
	}
	lower(s.RankRate(from, hostOf(from)))
	lower(s.RankRate(to, hostOf(to)))
	return rate
}

// RankRate is the rate (bytes/s, 0 unlimited) at which rank, on host, moves
// data: a slow rank or a rank of a slow host.
func (s *Set) RankRate(rank int, host string) float64 {
	if s == nil {
		return 0
	}
	rate := s.rankRate[rank]
	if h, ok := s.hostRate[host]; ok && (rate == 0 || h < rate) {
		rate = h
	}
	return rate
}

// Late is how long rank waits before it issues each operation.
func (s *Set) Late(rank int) time.Duration {
	if s == nil {
		return 0
	}
	return s.rankLate[rank]
}

// Delay is the delay of every message between ranks a and b.
func (s *Set) Delay(a, b int) time.Duration {
	if s == nil {
		return 0
	}
	var d time.Duration
	for l, v := range s.linkDelay {
		if l.has(a, b) {
			d = max(d, v)
		}
	}
	return d
}

// Throttle paces a stream to a rate: after each write of n bytes, Wait
// returns how long to sleep so the stream keeps to the rate. Idle time is
// never banked as credit: a stream that pauses resumes at the rate, not
// with a burst.
type Throttle struct {
	Rate float64 // bytes per second; 0 means no limit
	next time.Time
}

// Wait accounts n more bytes and returns the pause that keeps the rate.
func (t *Throttle) Wait(n int) time.Duration {
	if t == nil || t.Rate <= 0 {
		return 0
	}
	now := time.Now()
	if t.next.Before(now) {
		t.next = now
	}
	t.next = t.next.Add(time.Duration(float64(n) / t.Rate * float64(time.Second)))
	return t.next.Sub(now)
}
