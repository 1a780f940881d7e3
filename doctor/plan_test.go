package doctor

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/rules"
)

// TestPairRoundsCoverEveryPairOnce checks the circle method for 2 to 1024
// members: n-1 rounds for even n, n for odd n, no member twice in a round,
// and every pair exactly once.
func TestPairRoundsCoverEveryPairOnce(t *testing.T) {
	ns := []int{100, 127, 128, 255, 256, 511, 512, 1000, 1023, 1024}
	for n := 2; n <= 64; n++ {
		ns = append(ns, n)
	}
	for _, n := range ns {
		rounds := rules.PairRounds(n)
		want := n - 1
		if n%2 == 1 {
			want = n
		}
		if len(rounds) != want {
			t.Fatalf("n=%d: %d rounds, want %d", n, len(rounds), want)
		}
		seen := map[[2]int]bool{}
		for k, round := range rounds {
			busy := map[int]bool{}
			for _, p := range round {
				if p[0] >= p[1] || p[0] < 0 || p[1] >= n { //nolint:gosec // the table's rows all have these fields
					t.Fatalf("n=%d round %d: bad pair %v", n, k, p)
				}
				if busy[p[0]] || busy[p[1]] {
					t.Fatalf("n=%d round %d: member in two pairs: %v", n, k, round)
				}
				busy[p[0]], busy[p[1]] = true, true
				if seen[p] {
					t.Fatalf("n=%d: pair %v twice", n, p)
				}
				seen[p] = true
			}
			if len(round) != n/2 {
				t.Fatalf("n=%d round %d: %d pairs, want %d", n, k, len(round), n/2)
			}
		}
		if len(seen) != n*(n-1)/2 {
			t.Fatalf("n=%d: %d pairs, want %d", n, len(seen), n*(n-1)/2)
		}
	}
}

// TestHostSearchIsConstant plays the host search for 2 to 4096 hosts with
// one bad host at every position class: pair every host once, then pair
// the suspects with hosts seen healthy. The bad host must be told apart
// (slow with two different partners) in at most 3 rounds, however many
// hosts there are.
func TestHostSearchIsConstant(t *testing.T) {
	for n := 2; n <= 4096; n = next(n) {
		for _, bad := range []int{0, n / 2, n - 1} {
			rounds := 0
			ran := map[[2]int]bool{}
			met := func(a, b int) bool { return ran[pairKey(a, b)] }
			slowWith := map[int]map[int]bool{}
			fine := map[int]bool{}
			note := func(a, b int) {
				ran[pairKey(a, b)] = true
				if a == bad || b == bad {
					for _, x := range [][2]int{{a, b}, {b, a}} {
						if slowWith[x[0]] == nil {
							slowWith[x[0]] = map[int]bool{}
						}
						slowWith[x[0]][x[1]] = true
					}
				} else {
					fine[a], fine[b] = true, true
				}
			}
			for _, round := range rules.HostRounds(n) {
				rounds++
				for _, p := range round {
					note(p[0], p[1])
				}
			}
			_, suspects := rules.Triage(n, slowWith, fine)
			var healthy []int
			for h := 0; h < n; h++ {
				if fine[h] {
					healthy = append(healthy, h)
				}
			}
			for _, round := range rules.Repair(suspects, healthy, met) {
				rounds++
				for _, p := range round {
					note(p[0], p[1])
				}
			}
			if rounds > 3 {
				t.Fatalf("%d hosts: %d rounds", n, rounds)
			}
			if n >= 3 && len(slowWith[bad]) < 2 {
				t.Fatalf("%d hosts, bad host %d: slow with only %v; not told apart", n, bad, slowWith[bad])
			}
			if n >= 3 && fine[bad] {
				t.Fatalf("%d hosts: the bad host %d was seen fine", n, bad)
			}
			culprits, left := rules.Triage(n, slowWith, fine)
			for _, h := range culprits {
				if h != bad {
					t.Fatalf("%d hosts: healthy host %d named, slow with %v", n, h, slowWith[h])
				}
			}
			if n >= 3 && (len(culprits) != 1 || len(left) != 0) {
				t.Fatalf("%d hosts, bad %d: culprits %v, still unexplained %v", n, bad, culprits, left)
			}
		}
	}
}

func next(n int) int {
	if n < 40 {
		return n + 1
	}
	return n*2 + 1
}

func TestHalves(t *testing.T) {
	a, b := rules.Halves([]int{4, 5, 6, 7, 8})
	if len(a) != 2 || len(b) != 3 || a[0] != 4 || b[0] != 6 {
		t.Fatalf("%v %v", a, b)
	}
}

func TestJudgeFlagsOutliersAndShortfalls(t *testing.T) {
	th := rules.Thresholds{Default: rules.DefaultRules, Class: map[string]rules.Rules{"loose": {Drop: 0.9}}}
	ss := []rules.Sample{
		{Key: "a", Class: "NV18", Value: 340, Expected: 478},
		{Key: "b", Class: "NV18", Value: 345, Expected: 478},
		{Key: "c", Class: "NV18", Value: 120, Expected: 478}, // far below its peers
		{Key: "d", Class: "NV18", Value: 338, Expected: 478},
		{Key: "e", Class: "PIX", Value: 10, Expected: 31.5}, // alone in its class, below 35 % of its link
		{Key: "f", Class: "loose", Value: 20},               // 80 % down, but the class allows 90 %
		{Key: "g", Class: "loose", Value: 100},
	}
	got := map[string]rules.Suspect{}
	for _, s := range rules.Judge(ss, th) {
		got[s.Key] = s
	}
	if len(got) != 2 || got["c"].Key == "" || got["e"].Key == "" {
		t.Fatalf("suspects %v", got)
	}
	if got["c"].Peers != 340 {
		t.Errorf("the peers figure should leave the suspect out: %v", got["c"].Peers)
	}
	if err := (rules.Thresholds{Default: rules.Rules{Drop: 1.5}}).Validate(); err == nil {
		t.Error("a drop above 1 is accepted")
	}
}

// TestSuspectsKeepASlowPartOfANoisyClass is what a clean-clone CI run saw
// (two drills side by side on 2 cores): the 12 cross pairs of two hosts
// spread so widely that judge's widened drop (90 %) let a link at a
// eighth of its peers' median pass, and doctor called the host pair
// healthy. The stages that measure suspects again take every figure below
// the rule's drop; judge, for the stages that do not, keeps the widening.
func TestSuspectsKeepASlowPartOfANoisyClass(t *testing.T) {
	th := rules.Thresholds{Default: rules.CPURules}
	vals := []float64{1.49, 0.4, 2.6, 0.5, 1.9, 0.6, 2.2, 0.7, 1.0, 1.5, 2.4, 0.15}
	var ss []rules.Sample
	for i, v := range vals {
		ss = append(ss, rules.Sample{Key: fmt.Sprint(i), Class: "cross", Value: v})
	}
	if got := rules.Judge(ss, th); len(got) != 0 {
		t.Fatalf("judge should widen this noisy class's drop past the slow link: %v", got)
	}
	got := rules.Suspects(ss, th)
	if len(got) != 1 || got[0].Key != "11" {
		t.Fatalf("suspects = %v, want the link at 0.15 alone", got)
	}
	// A class without noise: both agree.
	for i := range ss {
		ss[i].Value = 1.5 + 0.01*float64(i%3)
	}
	ss[4].Value = 0.3
	a, b := rules.Judge(ss, th), rules.Suspects(ss, th)
	if len(a) != 1 || len(b) != 1 || a[0].Key != "4" || b[0].Key != "4" {
		t.Errorf("judge %v, suspects %v: want key 4 from both", a, b)
	}
}

func TestRoundProgress(t *testing.T) {
	for _, c := range []struct {
		done, plan int
		took       time.Duration
		want       string
	}{
		{1, 4, 10 * time.Second, "across hosts: round 1 of 4, 10 s so far, about 30 s left"},
		{4, 4, 40 * time.Second, "across hosts: round 4 of 4, 40 s so far"},
		{6, 4, 61 * time.Second, "across hosts: round 6 (4 planned, then suspects measured again), 61 s so far"},
	} {
		if got := roundProgress("across hosts", c.done, c.plan, c.took); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

// TestConfirmStepClearsAPairOnlyByItsOwnFigure is what a make test run
// on a loaded 2-core host saw: a link delayed 20 ms (rank 2 with rank 5)
// and a healthy pair of the same rank that was slow once (rank 2 with 6)
// were both suspects; 2-6 was measured again for both, was fine, and the
// delayed link was cleared with it. A fine representative clears itself
// alone; the pairs it stood for stay, to be measured themselves; a slow
// one keeps them as standing by it.
func TestConfirmStepClearsAPairOnlyByItsOwnFigure(t *testing.T) {
	// Pairs 0 (2-6) and 1 (2-5) share rank 2 and are measured through
	// pair 0; pair 2 (elsewhere) is measured itself.
	repOf := []int{0, 0, 2}
	keep, measured, stood := confirmStep(repOf, map[int]bool{2: true})
	if keep[0] || !keep[1] || !keep[2] {
		t.Errorf("representative fine: keep %v, want [false true true]", keep)
	}
	if !measured[0] || measured[1] || !measured[2] || stood[1] {
		t.Errorf("measured %v, stood %v", measured, stood)
	}
	keep, _, stood = confirmStep(repOf, map[int]bool{0: true})
	if !keep[0] || !keep[1] || keep[2] || !stood[1] {
		t.Errorf("representative slow: keep %v, stood %v", keep, stood)
	}
}

// TestSuspectRoundsMeasureAloneWhereRanksShareCores: suspects are measured
// again in rounds of disjoint pairs, except where the ranks share their
// machine's cores (cpu, mpi): there one pair of a machine runs at a time,
// so a neighbour's measurement cannot make a healthy pair look slow, and
// machines apart run theirs at once.
func TestSuspectRoundsMeasureAloneWhereRanksShareCores(t *testing.T) {
	pairs := [][2]int{{0, 2}, {1, 3}, {0, 1}, {4, 5}, {6, 7}}
	oneMachine := func(int) int { return 0 }
	hostsOfFour := func(r int) int { return r / 4 }
	for _, tc := range []struct {
		name      string
		machineOf func(int) int
		want      [][][2]int
	}{
		{"GPUs", nil, [][][2]int{{{0, 2}, {1, 3}, {4, 5}, {6, 7}}, {{0, 1}}}},
		{"one machine", oneMachine, [][][2]int{{{0, 2}}, {{1, 3}}, {{0, 1}}, {{4, 5}}, {{6, 7}}}},
		{"two machines", hostsOfFour, [][][2]int{{{0, 2}, {4, 5}}, {{1, 3}, {6, 7}}, {{0, 1}}}},
	} {
		if got := suspectRounds(pairs, tc.machineOf); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: rounds %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, b := range []string{"cpu", "mpi"} {
		if !facts.HostMemory(b) {
			t.Errorf("the %s backend's ranks are not taken to share the host's cores", b)
		}
	}
	if facts.HostMemory("nccl") {
		t.Error("the nccl backend's ranks are taken to share the host's cores")
	}
}

// TestMPIRulesPassTheSchedulersSlowMode: the one-way pair figures of a
// healthy doctor --backend mpi run (4 ranks on 2 cores, GB/s), which named
// 1-3 under the cpu backend's rules; under the mpi backend's rules nobody
// is named, and a pair planted at 1 % of its peers still is. Each backend
// gets its own rules.
func TestMPIRulesPassTheSchedulersSlowMode(t *testing.T) {
	healthy := map[string]float64{"0-1": 9.13, "0-2": 9.52, "0-3": 5.08, "1-2": 5.33, "1-3": 1.44, "2-3": 1.47}
	samples := func(slow string, v float64) []rules.Sample {
		var ss []rules.Sample
		for k, f := range healthy {
			if k == slow {
				f = v
			}
			ss = append(ss, rules.Sample{Key: k, Class: "same host", Value: f})
		}
		return ss
	}
	if got := rules.Suspects(samples("", 0), rules.Thresholds{Default: rules.CPURules}); len(got) == 0 {
		t.Fatal("the cpu backend's rules should name the scheduler's slow mode here; the case no longer shows what it stands for")
	}
	if got := rules.Suspects(samples("", 0), rules.Thresholds{Default: rules.RulesFor("mpi")}); len(got) != 0 {
		t.Errorf("mpi rules named healthy pairs: %v", got)
	}
	if got := rules.Suspects(samples("0-2", 0.05), rules.Thresholds{Default: rules.RulesFor("mpi")}); len(got) != 1 || got[0].Key != "0-2" {
		t.Errorf("mpi rules with 0-2 at 0.05 GB/s: %v, want 0-2 alone", got)
	}
	for backend, want := range map[string]rules.Rules{"nccl": rules.DefaultRules, "cpu": rules.CPURules, "mpi": rules.MPIRules} {
		if got := rules.RulesFor(backend); got != want {
			t.Errorf("RulesFor(%s) = %+v, want %+v", backend, got, want)
		}
	}
}
