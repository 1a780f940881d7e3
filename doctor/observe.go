package doctor

import (
	"collbench/results"
)

// What measuring observes besides the figures, kept on the meter for the
// verdict: the groups that received wrong values, the paths between hosts
// NCCL's proxy showed inside doctor's collectives, and each rank's
// traffic by stage.

// observed is what measuring saw besides the figures, for the verdict.
type observed struct {
	wrong []wrongObs
	// paths are the network paths between hosts that NCCL's proxy showed
	// inside doctor's collectives, by stage (rank 0's, from the plugin).
	paths map[pathKey]*pathSum
	// moved is doctor's own tally of the bytes each world rank sent and
	// received, by stage, for the error counters' rates.
	moved map[string]map[int]*traffic
}

// wrongObs is a group in which some rank received wrong values.
type wrongObs struct {
	Stage string             `json:"stage"`
	Coll  string             `json:"coll"`
	Group []int              `json:"group"` // world ranks in group order
	Bad   []results.Mismatch `json:"bad"`   // Rank is the world rank
	Count int64              `json:"count"`
}

// pathKey is one directed path within one stage.
type pathKey struct {
	stage    string
	from, to int
}

// pathSum is what a stage's collectives moved over one path.
type pathSum struct {
	bytes  int64
	wireUS float64
}

// traffic is what one rank sent and received in one stage: over links
// within its host, across hosts, and within its own memory (a group of one).
type traffic struct {
	Link, Net, Local float64
}
