package doctor

import (
	"fmt"
	"testing"
)

// TestCrossControlsAreHealthyPairsElsewhere: the pairs measured beside a
// round of suspects across hosts are of the suspects' classes, on hosts
// no suspect of the round is on, never suspects themselves, each rank in
// one pair at most, at most controlsPerRound a class, and none where
// every host holds a suspect.
func TestCrossControlsAreHealthyPairsElsewhere(t *testing.T) {
	search := func(hosts, gpus int) *search {
		d := &search{members: map[string][]int{}}
		for h := range hosts {
			name := fmt.Sprintf("node%d", h)
			d.hostList = append(d.hostList, name)
			for g := range gpus {
				d.members[name] = append(d.members[name], h*gpus+g)
			}
		}
		return d
	}
	for _, tc := range []struct {
		what      string
		hosts     int
		round     []crossID
		other     []crossID // suspects of other rounds
		rail, x   int       // controls wanted of each class
		noneFromH []int     // hosts no control may be on
	}{
		{"one cross-rail suspect on 8 hosts", 8, []crossID{{HA: 6, HB: 7, LA: 7, LB: 4}}, nil, 0, 3, []int{6, 7}},
		{"a rail and a cross-rail suspect", 8, []crossID{{HA: 0, HB: 1, LA: 2, LB: 2}, {HA: 2, HB: 3, LA: 1, LB: 5}}, nil, 3, 3, []int{0, 1, 2, 3}},
		{"suspects elsewhere are not controls", 4, []crossID{{HA: 0, HB: 1, LA: 0, LB: 1}},
			[]crossID{{HA: 2, HB: 3, LA: 0, LB: 1}, {HA: 3, HB: 2, LA: 2, LB: 1}}, 0, 3, []int{0, 1}},
		{"two hosts: no host free", 2, []crossID{{HA: 0, HB: 1, LA: 0, LB: 3}}, nil, 0, 0, nil},
	} {
		d := search(tc.hosts, 8)
		sus := map[crossID]bool{}
		for _, c := range append(append([]crossID{}, tc.round...), tc.other...) {
			sus[c] = true
		}
		got := d.crossControls(tc.round, sus)
		n := map[string]int{}
		ranks := map[int]bool{}
		for _, c := range got {
			n[crossClass(c)]++
			flip := crossID{HA: c.HB, HB: c.HA, LA: c.LB, LB: c.LA}
			if sus[c] || sus[flip] {
				t.Errorf("%s: control %+v is a suspect", tc.what, c)
			}
			for _, h := range tc.noneFromH {
				if c.HA == h || c.HB == h {
					t.Errorf("%s: control %+v is on host %d, which a suspect of the round is on", tc.what, c, h)
				}
			}
			for side := range 2 {
				r := d.crossRank(c, side)
				if ranks[r] {
					t.Errorf("%s: rank %d is in two controls", tc.what, r)
				}
				ranks[r] = true
			}
		}
		if n["rail"] != tc.rail || n["cross-rail"] != tc.x {
			t.Errorf("%s: %d rail and %d cross-rail controls (%+v), want %d and %d", tc.what, n["rail"], n["cross-rail"], got, tc.rail, tc.x)
		}
	}
}
