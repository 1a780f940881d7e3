package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"collbench/internal/words"
)

// WorldMember is one process of a world as `collbench world` shows it.
type WorldMember struct {
	Rank      int    `json:"rank"`
	Host      string `json:"host"`
	LocalRank int    `json:"local_rank"`
	PID       int    `json:"pid"`
}

// maxWorldRows is the most processes `collbench world` lists one row each;
// past it the world is rolled up per host.
const maxWorldRows = 16

// WriteWorld writes how a world was formed: a row per process for a small
// world; for a large one, one line on the hosts and their shape, the hosts
// that differ from the rest (a row each, the first few), and a sample.
func WriteWorld(w io.Writer, members []WorldMember) error {
	if len(members) <= maxWorldRows {
		tb := PlainTable(w)
		tb.Header("rank", "host", "local rank", "pid")
		for _, m := range members {
			if err := tb.Append(fmt.Sprint(m.Rank), m.Host, fmt.Sprint(m.LocalRank), fmt.Sprint(m.PID)); err != nil {
				return err
			}
		}
		return tb.Render()
	}
	type hostRow struct {
		name  string
		ranks []int
		local []int
	}
	var order []string
	by := map[string]*hostRow{}
	for _, m := range members {
		h := by[m.Host]
		if h == nil {
			h = &hostRow{name: m.Host}
			by[m.Host] = h
			order = append(order, m.Host)
		}
		h.ranks = append(h.ranks, m.Rank)
		h.local = append(h.local, m.LocalRank)
	}
	counts := map[int]int{}
	for _, h := range by {
		counts[len(h.ranks)]++
	}
	usual := 0
	for n, c := range counts {
		if c > counts[usual] || (c == counts[usual] && n > usual) {
			usual = n
		}
	}
	// A host is regular when it has the usual count of processes, holds
	// one run of ranks, and its local ranks are 0..k-1 in rank order.
	regular := func(h *hostRow) (bool, string) {
		if len(h.ranks) != usual {
			return false, fmt.Sprintf("%d process(es) (most hosts have %d)", len(h.ranks), usual)
		}
		for i := range h.ranks {
			if h.local[i] != i {
				return false, "local ranks " + words.Ranges(h.local) + " (want 0-" + fmt.Sprint(usual-1) + " in rank order)"
			}
			if i > 0 && h.ranks[i] != h.ranks[i-1]+1 {
				return false, "ranks not in one run"
			}
		}
		return true, ""
	}
	var odd []string
	for _, name := range order {
		if ok, why := regular(by[name]); !ok {
			odd = append(odd, name+": "+why)
		}
	}
	fmt.Fprintf(w, "%s processes on %s hosts; %s of them hold %d processes each, one run of ranks with local ranks 0-%d\n",
		words.Count(len(members)), words.Count(len(order)), words.Count(len(order)-len(odd)), usual, usual-1)
	if len(odd) > 0 {
		shown := odd[:min(len(odd), maxWorldRows/2)]
		fmt.Fprintf(w, "%s host(s) differ: %s", words.Count(len(odd)), strings.Join(shown, "; "))
		if len(odd) > len(shown) {
			fmt.Fprintf(w, "; and %s more", words.Count(len(odd)-len(shown)))
		}
		fmt.Fprintln(w)
	}
	tb := PlainTable(w)
	tb.Header("host", "processes", "ranks", "local ranks")
	sample := order[:min(3, len(order))]
	if last := order[len(order)-1]; !slices.Contains(sample, last) {
		sample = append(sample, last)
	}
	for _, name := range sample {
		h := by[name]
		if err := tb.Append(name, fmt.Sprint(len(h.ranks)), words.Ranges(h.ranks), words.Ranges(h.local)); err != nil {
			return err
		}
	}
	return tb.Render()
}
