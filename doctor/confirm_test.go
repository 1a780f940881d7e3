package doctor

import (
	"fmt"
	"strings"
	"testing"
)

// TestCrossControls: the healthy pairs measured beside the suspects are
// no suspect, have no rank found slow alone and no rank of the round's
// suspects, use each rank once, spread over the host pairs in turn, and
// stop at what was asked.
func TestCrossControls(t *testing.T) {
	const hosts, per = 4, 4
	d := &search{n: hosts * per, rank0: true, slowRanks: map[int]suspect{5: {}}, members: map[string][]int{}}
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
		d := &search{ctlN: tc.ctlN, ctlSlow: tc.ctlSlow}
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
		d := &search{o: Options{Thresholds: Thresholds{Default: DefaultRules}}, crossScale: 0.25, ctlRounds: tc.rounds, lowRounds: tc.low}
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
// its ranks where one is (in turn by attempt); never a suspect or a pair
// with a rank found slow alone; another host's where the suspect's host
// has none; none where no healthy pair is left.
func TestPairControl(t *testing.T) {
	hostOf := func(r int) string { return fmt.Sprint(r / 4) }
	// Two hosts of 4 ranks: every pair of each, in three rounds.
	rounds := [][][2]int{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, {{0, 3}, {1, 2}, {4, 7}, {5, 6}}}
	none := map[int]suspect{}
	for _, tc := range []struct {
		name     string
		suspects [][2]int
		slow     map[int]suspect
		p        [2]int
		attempt  int
		want     [2]int
		ok       bool
	}{
		{"same host, apart", [][2]int{{1, 2}}, none, [2]int{1, 2}, 0, [2]int{0, 3}, true},
		{"the one apart, at a later attempt", [][2]int{{0, 1}}, none, [2]int{0, 1}, 1, [2]int{2, 3}, true},
		{"not a suspect", [][2]int{{0, 1}, {2, 3}}, none, [2]int{0, 1}, 0, [2]int{4, 5}, true},
		{"not a slow rank's", [][2]int{{0, 1}}, map[int]suspect{2: {}}, [2]int{0, 1}, 0, [2]int{4, 5}, true},
		{"touching, where nothing else is", [][2]int{{0, 1}, {2, 3}, {4, 5}, {4, 6}, {4, 7}, {5, 6}, {5, 7}, {6, 7}}, none, [2]int{0, 1}, 0, [2]int{0, 2}, true},
		{"none left", [][2]int{{0, 1}}, map[int]suspect{2: {}, 3: {}, 4: {}, 5: {}, 6: {}, 7: {}}, [2]int{0, 1}, 0, [2]int{}, false},
	} {
		got, ok := pairControl(rounds, tc.suspects, tc.slow, hostOf, tc.p, tc.attempt)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: control %v (%v), want %v (%v)", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
