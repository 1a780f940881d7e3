package doctor

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
)

// TestCrossControls: the healthy pairs measured beside the suspects are
// no suspect, have no rank found slow alone and no rank of the round's
// suspects, use each rank once, spread over the host pairs in turn, and
// stop at what was asked.
func TestCrossControls(t *testing.T) {
	const hosts, per = 4, 4
	d := &crossRun{meter: newHandRun(hosts*per, Options{}).meter, before: outcome{slowRanks: map[int]rules.Suspect{5: {}}}}
	for h := range hosts {
		name := fmt.Sprintf("h%d", h)
		d.hostList = append(d.hostList, name)
		for l := range per {
			d.members[name] = append(d.members[name], h*per+l)
		}
	}
	// Every pair of ranks across host pairs 0-1 and 2-3, as measured.
	for _, hp := range [][2]int{{0, 1}, {2, 3}} {
		for s, pairs := range CrossRounds(per, per) {
			for _, l := range pairs {
				c := crossID{HA: hp[0], HB: hp[1], LA: l[0], LB: l[1]}
				d.crossSeen = append(d.crossSeen, crossFig{crossID: c, A: d.crossRank(c, 0), B: d.crossRank(c, 1), Both: float64(10 + s)})
			}
		}
	}
	suspect := map[crossID]bool{{HA: 0, HB: 1, LA: 0, LB: 1}: true}
	round := [][2]int{{0, 5}, {8, 12}} // ranks of the round's suspects
	got := d.crossControls(round, suspect, 5)
	if len(got) != 5 {
		t.Fatalf("%d controls, want 5: %+v", len(got), got)
	}
	used := map[int]bool{0: true, 5: true, 8: true, 12: true}
	hostPairs := map[[2]int]int{}
	for _, c := range got {
		switch {
		case suspect[c.crossID]:
			t.Errorf("control %+v is a suspect", c.crossID)
		case c.A == 5 || c.B == 5:
			t.Errorf("control %+v has rank 5, found slow alone", c.crossID)
		case used[c.A] || used[c.B]:
			t.Errorf("control %+v reuses a rank of the round or of another control", c.crossID)
		}
		used[c.A], used[c.B] = true, true
		hostPairs[[2]int{c.HA, c.HB}]++
	}
	if hostPairs[[2]int{0, 1}] == 0 || hostPairs[[2]int{2, 3}] == 0 {
		t.Errorf("controls on host pairs %v, want both host pairs", hostPairs)
	}
	// As many as the free ranks allow, and no more.
	if all := d.crossControls(round, suspect, 100); len(all) > (hosts*per-4)/2 {
		t.Errorf("%d controls from %d free ranks", len(all), hosts*per-4)
	}
}

// TestAgainNeeded: the slow measurements again a pair needs grow with how
// often healthy controls were slow and with the pairs tested, and stay
// at one where no control was measured.
func TestAgainNeeded(t *testing.T) {
	for _, tc := range []struct {
		ctlN, ctlSlow, tested, want int
	}{
		{0, 0, 16, 1},     // no controls: as before
		{200, 0, 1, 1},    // p = 1/202: one is enough for 1 pair tested
		{100, 0, 2, 2},    // p = 1/102: 2 pairs tested need 2
		{14, 0, 16, 3},    // p = 1/16, 16 pairs: 16/16^3 = 0.004
		{40, 4, 16, 4},    // p = 5/42: 16 p^3 = 0.027, 16 p^4 = 0.0032
		{20, 10, 16, 4},   // p = 1/2: never enough; at most confirmAttempts+1
		{200, 0, 1000, 3}, // many pairs tested need more
	} {
		d := &crossRun{ctlN: tc.ctlN, ctlSlow: tc.ctlSlow}
		if got := d.againNeeded(tc.tested); got != tc.want {
			t.Errorf("controls %d (slow %d), %d tested: %d measurements again, want %d", tc.ctlN, tc.ctlSlow, tc.tested, got, tc.want)
		}
	}
}

// TestBusyFabricNeedsTwoRounds: the fabric is warned of when the controls
// beside pairs measured again fell below their first figures by more than
// the drop in two rounds, or in the only round there was; one such round
// of several is a moment's noise (a 2-core CI machine with two drills side
// by side had one round of nine at 25%) and warns of nothing.
func TestBusyFabricNeedsTwoRounds(t *testing.T) {
	for _, tc := range []struct {
		rounds, low int
		warned      bool
	}{{0, 0, false}, {1, 0, false}, {1, 1, true}, {9, 1, false}, {9, 2, true}, {2, 2, true}} {
		d := &crossRun{meter: newHandRun(0, Options{Thresholds: rules.Thresholds{Default: rules.DefaultRules}}).meter, crossScale: 0.25, ctlRounds: tc.rounds, lowRounds: tc.low}
		if tc.low == 0 {
			d.crossScale = 1
		}
		d.nameBusyFabric()
		if got := len(d.found) == 1 && d.found[0].Kind == "busy-fabric"; got != tc.warned {
			t.Errorf("%d of %d rounds low: warned %v, want %v (%v)", tc.low, tc.rounds, got, tc.warned, d.found)
		}
		if tc.warned && !strings.Contains(d.found[0].Msg, fmt.Sprintf("in %d of %d rounds", tc.low, tc.rounds)) {
			t.Errorf("message: %s", d.found[0].Msg)
		}
	}
}

// TestPairControl: the healthy pair measured after a suspect pair where
// ranks share the host's cores is of the suspect's host and apart from
// its ranks where one is (in turn by attempt), else of its host with one
// of its ranks; never a suspect or a pair with a rank found slow alone;
// another host's on the same machine where the suspect's host has none,
// never one on another machine; none where no healthy pair is left.
func TestPairControl(t *testing.T) {
	hostOf := func(r int) string { return fmt.Sprint(r / 4) }
	oneMachine := func(int) int { return 0 }
	hostsApart := func(r int) int { return r / 4 }
	// Two hosts of 4 ranks: every pair of each, in three rounds.
	rounds := [][][2]int{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, {{0, 3}, {1, 2}, {4, 7}, {5, 6}}}
	none := map[int]rules.Suspect{}
	allOfHost0 := [][2]int{{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}
	for _, tc := range []struct {
		name      string
		suspects  [][2]int
		slow      map[int]rules.Suspect
		machineOf func(int) int
		p         [2]int
		attempt   int
		want      [2]int
		ok        bool
	}{
		{"same host, apart", [][2]int{{1, 2}}, none, oneMachine, [2]int{1, 2}, 0, [2]int{0, 3}, true},
		{"the one apart, at a later attempt", [][2]int{{0, 1}}, none, oneMachine, [2]int{0, 1}, 1, [2]int{2, 3}, true},
		{"not a suspect: touching, of its host", [][2]int{{0, 1}, {2, 3}}, none, oneMachine, [2]int{0, 1}, 0, [2]int{0, 2}, true},
		{"not a slow rank's", [][2]int{{0, 1}}, map[int]rules.Suspect{2: {}}, oneMachine, [2]int{0, 1}, 0, [2]int{1, 3}, true},
		{"another host's, where its host has none", allOfHost0, none, oneMachine, [2]int{0, 1}, 0, [2]int{4, 5}, true},
		{"touching, where nothing else is", [][2]int{{0, 1}, {2, 3}, {4, 5}, {4, 6}, {4, 7}, {5, 6}, {5, 7}, {6, 7}}, none, oneMachine, [2]int{0, 1}, 0, [2]int{0, 2}, true},
		{"none left", [][2]int{{0, 1}}, map[int]rules.Suspect{2: {}, 3: {}, 4: {}, 5: {}, 6: {}, 7: {}}, oneMachine, [2]int{0, 1}, 0, [2]int{}, false},
		{"never another machine's", allOfHost0, none, hostsApart, [2]int{0, 1}, 0, [2]int{}, false},
	} {
		isSuspect := map[[2]int]bool{}
		for _, k := range tc.suspects {
			isSuspect[k] = true
		}
		got, ok := pairControl(rounds, isSuspect, tc.slow, hostOf, tc.machineOf, tc.p, tc.attempt)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: control %v (%v), want %v (%v)", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// busyHostModel is hosts of per ranks (4 where per is 0) whose pairs move 10 GB/s, the
// pairs in slow at a tenth of that, while another workload takes a host's
// cores over a window of measurements: every pair of host busy[i].host
// measured in calls from..to (counted from 0 in the order doctor measures)
// runs at a fifth of its speed.
type busyHostModel struct {
	per  int
	slow [][2]int
	busy []busyWindow
	// throttled: a slow pair runs no slower in a busy window (a link
	// throttled to its rate waits on nothing the busy cores take).
	throttled bool
	calls     int
	seen      [][][2]int // each call's pairs
}

type busyWindow struct {
	host     string
	from, to int
}

func (m *busyHostModel) hostOf(r int) string { return fmt.Sprintf("h%d", r/max(m.per, 2)) }

func (m *busyHostModel) round(pairs [][2]int, _ int) map[[2]int]record.PairFigure {
	call := m.calls
	m.calls++
	m.seen = append(m.seen, pairs)
	out := map[[2]int]record.PairFigure{}
	for _, p := range pairs {
		v := 10.0
		slow := slices.Contains(m.slow, pairKey(p[0], p[1]))
		if slow {
			v /= 10
		}
		for _, w := range m.busy {
			if m.hostOf(p[0]) == w.host && call >= w.from && call <= w.to && (!slow || !m.throttled) {
				v /= 5
			}
		}
		k := pairKey(p[0], p[1])
		out[k] = record.PairFigure{A: k[0], B: k[1], Host: m.hostOf(p[0]), Class: "shm", AB: v, BA: v, Both: v}
	}
	return out
}

// TestPairsBusyHostWindow plants another workload that takes a host's
// cores from one round of the first pass on, at several places (either
// host, from the second or the last round, until the end or only until
// the first measurement again): on a host-memory backend each suspect
// pair measured again beside its control is cleared, and a pair slow on
// its own is still named inside the window. The same model on a backend
// without controls names the healthy pairs: the plant bites. A host of
// two ranks has no pair of its own to compare with (docs/doctor.md).
func TestPairsBusyHostWindow(t *testing.T) {
	const end = 1 << 30
	for _, tc := range []struct {
		name    string
		backend string
		per     int
		slow    [][2]int
		busy    []busyWindow
		want    []string
	}{
		{"host 0 from the last round", "cpu", 4, nil, []busyWindow{{"h0", 2, end}}, nil},
		{"host 1 from the second round", "cpu", 4, nil, []busyWindow{{"h1", 1, end}}, nil},
		{"host 1 for the first attempt only", "cpu", 4, nil, []busyWindow{{"h1", 2, 4}}, nil},
		{"both hosts, one after the other", "cpu", 4, nil, []busyWindow{{"h0", 1, end}, {"h1", 2, end}}, nil},
		{"a slow pair inside the window", "cpu", 4, [][2]int{{4, 5}}, []busyWindow{{"h1", 1, end}}, []string{"4-5"}},
		{"a slow pair of the other host", "cpu", 4, [][2]int{{1, 2}}, []busyWindow{{"h1", 2, end}}, []string{"1-2"}},
		{"no controls: the healthy pairs are named", "nccl", 4, nil, []busyWindow{{"h0", 2, end}}, []string{"0-2", "1-3"}},
		{"hosts of two ranks: no control of its host", "cpu", 2, nil, []busyWindow{{"h1", 0, end}}, []string{"2-3"}},
	} {
		m := &busyHostModel{per: tc.per, slow: tc.slow, busy: tc.busy}
		got := m.search(t, tc.backend, 8, nil)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: named %v, want %v (%d measurements)", tc.name, got, tc.want, m.calls)
		}
	}
}

// TestPairsThrottledPairInABusyMoment plants a pair throttled to a tenth
// of its peers' rate and another workload on its host's cores at several
// places of its measurements again (the first attempt, the second, two
// attempts, on either host): the throttled pair runs no slower there, its
// control does, and the scaled bar falls below the pair; it is named all
// the same, measured again after the busy moment. A moment that outlasts
// the retries clears it (the limit, stated).
func TestPairsThrottledPairInABusyMoment(t *testing.T) {
	const end = 1 << 30
	for _, tc := range []struct {
		name string
		slow [2]int
		busy busyWindow
		want []string
	}{
		{"the first attempt", [2]int{4, 5}, busyWindow{"h1", 3, 4}, []string{"4-5"}},
		{"the second attempt", [2]int{4, 5}, busyWindow{"h1", 5, 6}, []string{"4-5"}},
		{"two attempts in a row", [2]int{4, 5}, busyWindow{"h1", 3, 6}, []string{"4-5"}},
		{"on the other host", [2]int{1, 2}, busyWindow{"h0", 3, 4}, []string{"1-2"}},
		{"beyond the retries", [2]int{4, 5}, busyWindow{"h1", 3, end}, nil},
	} {
		m := &busyHostModel{per: 4, slow: [][2]int{tc.slow}, busy: []busyWindow{tc.busy}, throttled: true}
		if got := m.search(t, "cpu", 8, nil); !slices.Equal(got, tc.want) {
			t.Errorf("%s: named %v, want %v (%d measurements)", tc.name, got, tc.want, m.calls)
		}
	}
}

// search runs the pair stage of a world of n ranks on the model, each
// host on the machine of boot id machine[host], and returns the pairs
// named slow.
func (m *busyHostModel) search(t *testing.T, backend string, n int, machine map[string]string) []string {
	t.Helper()
	d := &pairRun{meter: newHandRun(n, Options{Backend: backend, Thresholds: rules.Thresholds{Default: rules.CPURules}, Machines: machine}).meter,
		outcome: outcome{slowPairs: map[string]rules.Suspect{}}, model: m.round}
	for r := range n {
		h := m.hostOf(r)
		if _, ok := d.members[h]; !ok {
			d.hostList = append(d.hostList, h)
		}
		d.members[h] = append(d.members[h], r)
		d.o.Hosts = append(d.o.Hosts, h)
	}
	if err := d.pairs(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range d.slowPairs {
		got = append(got, k)
	}
	slices.Sort(got)
	return got
}

// TestPairsMeasuredAgainOneMachineAtATime: on a host-memory backend, pairs
// measured again (suspects and their controls) run one per machine at a
// time: hosts of machines apart at once (4 hosts: 2 rounds an attempt),
// simulated hosts of one machine one after another (8 rounds), and a slow
// pair planted on every host is named either way.
func TestPairsMeasuredAgainOneMachineAtATime(t *testing.T) {
	slow := [][2]int{{0, 1}, {4, 5}, {8, 9}, {12, 13}}
	want := []string{"0-1", "12-13", "4-5", "8-9"}
	for _, tc := range []struct {
		name    string
		machine map[string]string
		calls   int
	}{
		{"four machines", map[string]string{"h0": "a", "h1": "b", "h2": "c", "h3": "d"}, 3 + 3*2},
		{"hosts without facts", nil, 3 + 3*2},
		{"four hosts on one machine", map[string]string{"h0": "a", "h1": "a", "h2": "a", "h3": "a"}, 3 + 3*8},
		{"two machines of two hosts", map[string]string{"h0": "a", "h1": "a", "h2": "b", "h3": "b"}, 3 + 3*4},
	} {
		m := &busyHostModel{per: 4, slow: slow}
		if got := m.search(t, "cpu", 16, tc.machine); !slices.Equal(got, want) {
			t.Errorf("%s: named %v, want %v", tc.name, got, want)
		}
		if m.calls != tc.calls {
			t.Errorf("%s: %d measurements, want %d", tc.name, m.calls, tc.calls)
		}
		for i, pairs := range m.seen[3:] {
			on := map[string]int{}
			for _, p := range pairs {
				mach := m.hostOf(p[0])
				if id, ok := tc.machine[mach]; ok {
					mach = id
				}
				if on[mach]++; on[mach] > 1 {
					t.Errorf("%s: measurement %d again has two pairs of machine %s: %v", tc.name, i+1, mach, pairs)
				}
			}
		}
	}
}

// TestPairsAgainRoundsDoNotGrowWithHosts: with a slow pair on every host
// and every host a machine of its own, the pairs measured again take the
// same rounds at 1, 16 and 128 hosts of 8 ranks (7 rounds of the first
// pass, then a round of suspects and one of controls for each of 3
// attempts), and every planted pair is named.
func TestPairsAgainRoundsDoNotGrowWithHosts(t *testing.T) {
	for _, hosts := range []int{1, 16, 128} {
		m := &busyHostModel{per: 8}
		machine := map[string]string{}
		var want []string
		for h := range hosts {
			machine[fmt.Sprintf("h%d", h)] = fmt.Sprint(h)
			a, b := h*8+h%8, h*8+(h+3)%8
			m.slow = append(m.slow, pairKey(a, b))
			want = append(want, fmt.Sprintf("%d-%d", min(a, b), max(a, b)))
		}
		slices.Sort(want)
		got := m.search(t, "cpu", hosts*8, machine)
		if !slices.Equal(got, want) {
			t.Errorf("%d hosts: named %d pairs, want %d", hosts, len(got), len(want))
		}
		if m.calls != 7+3*2 {
			t.Errorf("%d hosts: %d rounds, want %d", hosts, m.calls, 7+3*2)
		}
	}
}

// crossBusyModel is two hosts of 4 ranks whose pairs across hosts carry
// 1 GB/s both ways, those of rank slowRank a tenth of that, while another
// workload takes the machine over the rounds measured again numbered in
// busy (counted from 0): every pair then runs at a tenth of its speed,
// the slow ones no slower than that (a throttled link is not slowed
// further by cores it waits on anyway).
type crossBusyModel struct {
	slowRank int
	busy     map[int]bool
	calls    int
}

func (m *crossBusyModel) round(groups [][]int) []float64 {
	busy := m.busy[m.calls]
	m.calls++
	out := make([]float64, len(groups))
	for i, g := range groups {
		out[i] = 1
		if g[0] == m.slowRank || g[1] == m.slowRank || busy {
			out[i] = 0.1
		}
	}
	return out
}

// TestCrossBusyRoundIsMeasuredAgain plants a rank slow with all four of its
// partners on the other host and a busy moment at several places of its
// measurements again (the first round, a middle one, two rounds in a
// row): it is named by its own network path with all 4 partners every
// time, as where no moment is busy. A round judged at such a moment clears the
// pairs measured in it, so the rank would be named by its other pairs as
// links, or not at all. A moment that outlasts the retries is judged as it
// is (the limit, stated).
func TestCrossBusyRoundIsMeasuredAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy []int
		want string
	}{
		{"no busy moment", nil, "slow-nic"},
		{"the first round", []int{0}, "slow-nic"},
		{"a middle round", []int{2}, "slow-nic"},
		{"two rounds in a row", []int{1, 2}, "slow-nic"},
		{"every round, beyond the retries", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, ""},
	} {
		const per = 4
		d := &crossRun{meter: newHandRun(2*per, Options{Thresholds: rules.Thresholds{Default: rules.CPURules}}).meter,
			before: outcome{slowRanks: map[int]rules.Suspect{}}, crossScale: 1, crossAgain: map[crossID][]againFig{}}
		for h := range 2 {
			name := fmt.Sprintf("h%d", h)
			d.hostList = append(d.hostList, name)
			for l := range per {
				d.members[name] = append(d.members[name], h*per+l)
			}
		}
		m := &crossBusyModel{slowRank: 1, busy: map[int]bool{}}
		for _, c := range tc.busy {
			m.busy[c] = true
		}
		d.crossModel = m.round
		d.o.Who = func(r int) string { return fmt.Sprintf("rank %d", r) }
		var ids []crossID
		var why []string
		var peers []float64
		for _, pairs := range CrossRounds(per, per) {
			for _, l := range pairs {
				c := crossID{HA: 0, HB: 1, LA: l[0], LB: l[1]}
				f := crossFig{crossID: c, A: d.crossRank(c, 0), B: d.crossRank(c, 1), Both: 1}
				if f.A == m.slowRank {
					f.Both = 0.1
					ids, why, peers = append(ids, c), append(why, "slow"), append(peers, 1)
				}
				d.crossSeen = append(d.crossSeen, f)
			}
		}
		step := 0
		ids, why, peers, err := d.confirmCross(ids, why, peers, &step)
		if err != nil {
			t.Fatal(err)
		}
		d.nameCross(ids, why, peers, d.crossSeen, nil)
		var kinds []string
		for _, f := range d.found {
			kinds = append(kinds, f.Kind)
		}
		if got := strings.Join(kinds, " "); got != tc.want {
			t.Errorf("%s: found %q, want %q (%d rounds measured again)", tc.name, got, tc.want, m.calls)
		} else if got != "" && !strings.Contains(d.found[0].Msg, "slow with 4 of the 4 ranks it met on other hosts") {
			t.Errorf("%s: %s, want all 4 of its partners (%d rounds measured again)", tc.name, d.found[0].Msg, m.calls)
		}
	}
}
