package measure

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"collbench/results"
)

// Layout splits the world's ranks into groups, each with its own
// communicator. Groups hold world ranks; a rank's index in its group is its
// rank in the group's communicator.
type Layout struct {
	// Spec is the layout as given (a list or a preset name).
	Spec string
	// Groups lists every group in group-id order; ranks that no list named
	// follow as groups of one, in rank order.
	Groups [][]int
}

// PresetHelp describes the presets for --help.
const PresetHelp = `rank lists: '[[0,1],[2,3]]' (a rank in no list runs alone), or a preset:
  all         one group of every rank (the default)
  pairs       [[0,1],[2,3],...]
  halves      first half and second half
  singletons  every rank alone
  node        one group per host
  cross-node  one group per local rank, across hosts
  stride:K    ranks spaced K apart: [[0,K,2K,..],[1,K+1,..],..]
  mod:N div:N and:MASK or:MASK   NCCL benchmark colours: ranks whose rank%N,
              rank/N, rank&MASK or rank|MASK match share a group`

// WholeWorld is the layout of one group holding every rank.
func WholeWorld(n int) Layout {
	g := make([]int, n)
	for i := range g {
		g[i] = i
	}
	return Layout{Spec: "all", Groups: [][]int{g}}
}

// ParseLayout resolves a rank list or preset for a world of n ranks whose
// hosts are hosts[rank] (nil: all on one host).
func ParseLayout(spec string, n int, hosts []string) (Layout, error) {
	s := strings.TrimSpace(spec)
	if s == "" || strings.EqualFold(s, "all") {
		return WholeWorld(n), nil
	}
	if strings.HasPrefix(s, "[") {
		groups, err := parseRankList(s)
		if err != nil {
			return Layout{}, err
		}
		return completeLayout(s, groups, n)
	}
	groups, err := presetGroups(strings.ToLower(s), n, hosts)
	if err != nil {
		return Layout{}, err
	}
	return completeLayout(s, groups, n)
}

// completeLayout checks groups and appends the ranks they leave out.
func completeLayout(spec string, groups [][]int, n int) (Layout, error) {
	where := map[int]int{}
	for gi, g := range groups {
		if len(g) == 0 {
			return Layout{}, fmt.Errorf("invalid --rank-list %s: group %d is empty", spec, gi)
		}
		for _, r := range g {
			switch {
			case r < 0:
				return Layout{}, fmt.Errorf("invalid --rank-list %s: rank %d in group %d is negative", spec, r, gi)
			case r >= n:
				return Layout{}, fmt.Errorf("invalid --rank-list %s: rank %d in group %d is outside the world of %d ranks (0-%d)", spec, r, gi, n, n-1)
			}
			if prev, dup := where[r]; dup {
				if prev == gi {
					return Layout{}, fmt.Errorf("invalid --rank-list %s: rank %d appears twice in group %d", spec, r, gi)
				}
				return Layout{}, fmt.Errorf("invalid --rank-list %s: rank %d appears in groups %d and %d", spec, r, prev, gi)
			}
			where[r] = gi
		}
	}
	out := Layout{Spec: spec}
	for _, g := range groups {
		out.Groups = append(out.Groups, append([]int(nil), g...))
	}
	for r := 0; r < n; r++ {
		if _, ok := where[r]; !ok {
			out.Groups = append(out.Groups, []int{r})
		}
	}
	return out, nil
}

// parseRankList reads '[[0,1],[2,3]]', naming the position of any error.
func parseRankList(s string) ([][]int, error) {
	p := &listParser{s: s}
	groups, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("invalid --rank-list %s: %v at position %d (use e.g. [[0,1],[2,3]])", s, err, p.pos+1)
	}
	return groups, nil
}

type listParser struct {
	s   string
	pos int
}

func (p *listParser) skip() {
	for p.pos < len(p.s) && unicode.IsSpace(rune(p.s[p.pos])) {
		p.pos++
	}
}

func (p *listParser) expect(c byte) error {
	p.skip()
	if p.pos >= len(p.s) {
		return fmt.Errorf("expected %q but the text ended", c)
	}
	if p.s[p.pos] != c {
		return fmt.Errorf("expected %q, found %q", c, p.s[p.pos])
	}
	p.pos++
	return nil
}

func (p *listParser) peek() byte {
	p.skip()
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *listParser) parse() ([][]int, error) {
	if err := p.expect('['); err != nil {
		return nil, err
	}
	var groups [][]int
	for {
		if p.peek() == ']' && len(groups) == 0 {
			return nil, fmt.Errorf("no groups")
		}
		g, err := p.group()
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
		switch p.peek() {
		case ',':
			p.pos++
			continue
		case ']':
			p.pos++
			if p.peek() != 0 {
				return nil, fmt.Errorf("unexpected %q after the list", p.s[p.pos])
			}
			return groups, nil
		case 0:
			return nil, fmt.Errorf("expected ',' or ']' but the text ended")
		default:
			return nil, fmt.Errorf("expected ',' or ']', found %q", p.s[p.pos])
		}
	}
}

func (p *listParser) group() ([]int, error) {
	if err := p.expect('['); err != nil {
		return nil, err
	}
	g := []int{}
	if p.peek() == ']' {
		p.pos++
		return g, nil
	}
	for {
		p.skip()
		start := p.pos
		if p.pos < len(p.s) && p.s[p.pos] == '-' {
			p.pos++
		}
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		if start == p.pos || (p.pos == start+1 && p.s[start] == '-') {
			p.pos = start
			if p.pos >= len(p.s) {
				return nil, fmt.Errorf("expected a rank number but the text ended")
			}
			return nil, fmt.Errorf("expected a rank number, found %q", p.s[p.pos])
		}
		v, err := strconv.Atoi(p.s[start:p.pos])
		if err != nil {
			text := p.s[start:p.pos]
			p.pos = start
			return nil, fmt.Errorf("rank number %s is too large", text)
		}
		g = append(g, v)
		switch p.peek() {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return g, nil
		case 0:
			return nil, fmt.Errorf("expected ',' or ']' but the text ended")
		default:
			return nil, fmt.Errorf("expected ',' or ']', found %q", p.s[p.pos])
		}
	}
}

// presetGroups expands a preset layout name (pairs, halves, singletons,
// node, cross-node, stride:K, div:K, and combinations) into groups of
// ranks for a world of n on the given hosts.
func presetGroups(name string, n int, hosts []string) ([][]int, error) {
	key, arg, hasArg := strings.Cut(name, ":")
	num := func() (int, error) {
		if !hasArg {
			return 0, fmt.Errorf("invalid --rank-list %s: %s needs a number, e.g. %s:2", name, key, key)
		}
		base := 10
		a := arg
		if strings.HasPrefix(a, "0x") {
			base, a = 16, a[2:]
		}
		v, err := strconv.ParseInt(a, base, 32)
		if err != nil || v < 0 || (v == 0 && key != "and" && key != "or") {
			return 0, fmt.Errorf("invalid --rank-list %s: %q is not a valid %s value", name, arg, key)
		}
		return int(v), nil
	}
	color := func(f func(r int) int) [][]int {
		byColor := map[int][]int{}
		var colors []int
		for r := 0; r < n; r++ {
			c := f(r)
			if _, ok := byColor[c]; !ok {
				colors = append(colors, c)
			}
			byColor[c] = append(byColor[c], r)
		}
		sort.Ints(colors)
		var out [][]int
		for _, c := range colors {
			out = append(out, byColor[c])
		}
		return out
	}
	hostOf := func(r int) string {
		if hosts == nil || r >= len(hosts) {
			return ""
		}
		return hosts[r]
	}
	switch key {
	case "pairs", "halves", "singletons", "node", "cross-node", "crossnode", "all":
		if hasArg {
			return nil, fmt.Errorf("invalid --rank-list %s: %s takes no argument (write %s)", name, key, key)
		}
	}
	switch key {
	case "pairs":
		return color(func(r int) int { return r / 2 }), nil
	case "halves":
		h := (n + 1) / 2
		return color(func(r int) int { return r / h }), nil
	case "singletons":
		return color(func(r int) int { return r }), nil
	case "node":
		ids := map[string]int{}
		return color(func(r int) int {
			h := hostOf(r)
			if _, ok := ids[h]; !ok {
				ids[h] = len(ids)
			}
			return ids[h]
		}), nil
	case "cross-node", "crossnode":
		seen := map[string]int{}
		local := make([]int, n)
		for r := 0; r < n; r++ {
			local[r] = seen[hostOf(r)]
			seen[hostOf(r)]++
		}
		return color(func(r int) int { return local[r] }), nil
	case "stride", "mod":
		k, err := num()
		if err != nil {
			return nil, err
		}
		return color(func(r int) int { return r % k }), nil
	case "div":
		k, err := num()
		if err != nil {
			return nil, err
		}
		return color(func(r int) int { return r / k }), nil
	case "and":
		m, err := num()
		if err != nil {
			return nil, err
		}
		return color(func(r int) int { return r & m }), nil
	case "or":
		m, err := num()
		if err != nil {
			return nil, err
		}
		return color(func(r int) int { return r | m }), nil
	}
	return nil, fmt.Errorf("invalid --rank-list %q: not a list such as [[0,1],[2,3]] nor a preset (all, pairs, halves, singletons, node, cross-node, stride:K, mod:N, div:N, and:MASK, or:MASK)", name)
}

// String writes the groups as a rank list.
func (l Layout) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, g := range l.Groups {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		for j, r := range g {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(r))
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

// Locate returns rank's group id and its rank in that group.
func (l Layout) Locate(rank int) (group, index int) {
	for gi, g := range l.Groups {
		for i, r := range g {
			if r == rank {
				return gi, i
			}
		}
	}
	return -1, -1
}

// Positions maps every rank of the layout to its group id and its rank in
// that group, in one pass: a process that holds many ranks locates them
// through it (Locate for each of n ranks is n² steps: 67 million for the
// cluster model's 8,192 ranks, every round).
func (l Layout) Positions() map[int][2]int {
	n := 0
	for _, g := range l.Groups {
		n += len(g)
	}
	pos := make(map[int][2]int, n)
	for gi, g := range l.Groups {
		for i, r := range g {
			if _, ok := pos[r]; !ok {
				pos[r] = [2]int{gi, i}
			}
		}
	}
	return pos
}

// Info computes rank's communicator attributes; local rank and size count
// the members of its group on its own host.
func (l Layout) Info(rank int, hosts []string) results.CommInfo {
	gi, idx := l.Locate(rank)
	n := 0
	for _, g := range l.Groups {
		n += len(g)
	}
	host := func(r int) string {
		if hosts == nil || r >= len(hosts) {
			return ""
		}
		return hosts[r]
	}
	info := results.CommInfo{WorldRank: rank, WorldSize: n, Rank: idx, Size: len(l.Groups[gi]), GroupID: gi,
		GroupSize: len(l.Groups), Host: host(rank)}
	for _, r := range l.Groups[gi] {
		if host(r) == host(rank) {
			if r == rank {
				info.LocalRank = info.LocalSize
			}
			info.LocalSize++
		}
	}
	return info
}
