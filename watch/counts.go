package watch

import (
	"fmt"
	"sort"
)

// Counts is what a collector has taken in: the evidence behind a watch
// that names nobody, and the first thing to read when it names nobody
// because nothing came (no process connected, or every summary dropped).
type Counts struct {
	Processes     int64 `json:"processes"`         // processes admitted, in all
	Summaries     int64 `json:"summaries"`         // summaries received
	Dropped       int64 `json:"summaries_dropped"` // dropped by the judge (Collector.Dropped)
	Operations    int64 `json:"operations_judged"` // operations every rank reported, judged
	Links         int64 `json:"links_judged"`      // link measurements judged (one link in one operation)
	LinksIn       int64 `json:"links_received"`    // link measurements received in summaries
	Communicators int   `json:"communicators"`     // communicators followed
	// Behind are the ranks that left the most operations unjudged (at
	// most MaxBehind): whose summaries were lost.
	Behind []RankBehind `json:"ranks_behind,omitempty"`
	// Every is the largest sample a sender sent at: only operations whose
	// number is a multiple of it were sent by every process.
	Every uint64 `json:"sampled_every,omitempty"`
	// Ops are the collectives the job issued, by communicator, function,
	// element type and count, most called first: what collbench tune
	// --from tunes.
	Ops []OpStat `json:"operations,omitempty"`
	// Libraries are the libraries the processes said they watch (at most
	// MaxLibraries), with how many said each: which NCCL the job ran.
	Libraries []LibraryCount `json:"libraries,omitempty"`
	// NVLink is what came of the GPUs' NVLink readings, where any did.
	NVLink *NVLinkCounts `json:"nvlink,omitempty"`
}

// MaxBehind bounds the ranks Counts names as behind.
const MaxBehind = 8

// RankBehind is one rank's share of what was not judged on a
// communicator: operations left unjudged without its summary (Missed),
// and its own summaries dropped.
type RankBehind struct {
	Comm    string `json:"communicator"`
	Rank    int    `json:"rank"`
	Host    string `json:"host,omitempty"`
	Missed  int64  `json:"operations_missed"`
	Dropped int64  `json:"summaries_dropped"`
}

// Behind returns the n ranks, over every communicator, that left the most
// operations unjudged (then dropped the most): whose summaries are lost.
// A scan of every rank followed: for the record's rewrites, not per
// summary.
func (c *Collector) Behind(n int) []RankBehind {
	var out []RankBehind
	for id, cm := range c.comms {
		for r := range cm.ranks {
			if cm.missed[r] == 0 && cm.drops[r] == 0 {
				continue
			}
			b := RankBehind{Comm: fmt.Sprintf("%016x", id), Rank: r, Missed: cm.missed[r], Dropped: cm.drops[r]}
			if who := cm.who[r]; who != nil {
				b.Host = who.Host
			}
			out = append(out, b)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Missed != out[b].Missed {
			return out[a].Missed > out[b].Missed
		}
		if out[a].Dropped != out[b].Dropped {
			return out[a].Dropped > out[b].Dropped
		}
		if out[a].Comm != out[b].Comm {
			return out[a].Comm < out[b].Comm
		}
		return out[a].Rank < out[b].Rank
	})
	return out[:min(n, len(out))]
}
