package rules

// PairRounds schedules every pair of n members into rounds of disjoint
// pairs by the circle method: n-1 rounds for even n, n for odd n (each
// member then sits out one round). Every pair appears exactly once.
func PairRounds(n int) [][][2]int {
	if n < 2 {
		return nil
	}
	m := n
	if m%2 == 1 {
		m++ // a phantom member: whoever meets it sits the round out
	}
	// Member 0 stays put; the others rotate around the circle.
	ring := make([]int, m-1)
	for i := range ring {
		ring[i] = i + 1
	}
	var rounds [][][2]int
	for r := 0; r < m-1; r++ {
		var round [][2]int
		pos := func(i int) int { // the member at seat i of this round
			if i == 0 {
				return 0
			}
			return ring[(i-1+r)%(m-1)]
		}
		for i := 0; i < m/2; i++ {
			a, b := pos(i), pos(m-1-i)
			if a >= n || b >= n {
				continue
			}
			if a > b {
				a, b = b, a
			}
			round = append(round, [2]int{a, b})
		}
		rounds = append(rounds, round)
	}
	return rounds
}

// HostRounds pairs n hosts for the first pass across hosts: 0-1, 2-3, ...
// in one round; with an odd count the last host pairs with host 0 in a
// second round, so every host is measured with a partner.
func HostRounds(n int) [][][2]int {
	if n < 2 {
		return nil
	}
	var first [][2]int
	for h := 0; h+1 < n; h += 2 {
		first = append(first, [2]int{h, h + 1})
	}
	rounds := [][][2]int{first}
	if n%2 == 1 {
		rounds = append(rounds, [][2]int{{0, n - 1}})
	}
	return rounds
}

// Repair pairs each suspect host with a distinct host already seen healthy
// that it has not met yet (met says which pairs ran), as many per round as
// there are healthy hosts, so a host slow with two different partners can
// be told from a slow link between two hosts. With a bounded number of
// suspects the number of rounds is bounded too, whatever the number of hosts.
func Repair(suspects, healthy []int, met func(a, b int) bool) [][][2]int {
	if len(healthy) == 0 {
		return nil
	}
	var rounds [][][2]int
	left := append([]int(nil), suspects...)
	for len(left) > 0 {
		used := map[int]bool{}
		var round [][2]int
		var later []int
		for _, s := range left {
			partner := -1
			for _, h := range healthy {
				if !used[h] && h != s && (met == nil || !met(s, h)) {
					partner = h
					break
				}
			}
			if partner < 0 {
				if len(round) == 0 && !anyUnmet(s, healthy, met) {
					continue // no healthy host it has not met: nothing more to learn
				}
				later = append(later, s)
				continue
			}
			used[partner] = true
			round = append(round, [2]int{s, partner})
		}
		if len(round) == 0 {
			break
		}
		rounds = append(rounds, round)
		left = later
	}
	return rounds
}

// Triage reads the host pairs measured so far: slowWith holds, for every
// host, the partners it was slow with, and fine the hosts seen fine with
// some partner. Culprits were slow with two different partners; suspects
// still need a healthy partner to tell them from a slow link: they were
// only seen slow, and not only with a culprit.
func Triage(hosts int, slowWith map[int]map[int]bool, fine map[int]bool) (culprits, suspects []int) {
	named := map[int]bool{}
	for h := 0; h < hosts; h++ {
		if len(slowWith[h]) >= 2 {
			named[h] = true
			culprits = append(culprits, h)
		}
	}
	for h := 0; h < hosts; h++ {
		if named[h] || fine[h] || len(slowWith[h]) == 0 {
			continue
		}
		explained := true
		for p := range slowWith[h] {
			explained = explained && named[p]
		}
		if !explained {
			suspects = append(suspects, h)
		}
	}
	return culprits, suspects
}

func anyUnmet(s int, healthy []int, met func(a, b int) bool) bool {
	for _, h := range healthy {
		if h != s && (met == nil || !met(s, h)) {
			return true
		}
	}
	return false
}

// Halves splits members into two halves for bisection.
func Halves(members []int) ([]int, []int) {
	h := len(members) / 2
	return append([]int(nil), members[:h]...), append([]int(nil), members[h:]...)
}
