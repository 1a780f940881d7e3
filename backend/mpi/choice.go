package mpi

// What a row says about MPI's algorithm, from Open MPI's settings (read in
// tuned.go, in the MPI build): the algorithm a setting forces, or that the
// library chooses per call. Plain Go, so every build tests the rules.

import (
	"fmt"
	"sort"
	"strings"

	"collbench/measure"
	"collbench/results"
)

// tunedName is each collective's name in Open MPI's coll/tuned settings
// (coll_tuned_NAME_algorithm); the point-to-point ones have none.
var tunedName = map[measure.Collective]string{
	measure.AllReduce: "allreduce", measure.AllGather: "allgather", measure.ReduceScatter: "reduce_scatter_block",
	measure.Broadcast: "bcast", measure.Reduce: "reduce", measure.AllToAll: "alltoall", measure.AllToAllV: "alltoallv",
	measure.Gather: "gather", measure.Scatter: "scatter",
}

// cvar is one control variable as read: found, its integer value and enum
// item, or its string.
type cvar struct {
	found bool
	n     int64
	item  string
	str   string
}

// collSettings are the settings that decide Open MPI's collective
// algorithms, as read once per world.
type collSettings struct {
	readable bool // the tool interface started and coll/tuned's settings were there
	dynamic  bool // coll_tuned_use_dynamic_rules
	rules    string
	tunedPri int64
	// outrank names a component that would be chosen before coll/tuned.
	outrank string
	forced  map[string]cvar // tuned name -> coll_tuned_NAME_algorithm
}

// settingsFrom reads the settings through read (readCvar, or a test's).
func settingsFrom(read func(name string) cvar) collSettings {
	var s collSettings
	pri := read("coll_tuned_priority")
	if !pri.found {
		return s
	}
	s.readable, s.tunedPri = true, pri.n
	s.dynamic = read("coll_tuned_use_dynamic_rules").n != 0
	s.rules = read("coll_tuned_dynamic_rules_filename").str
	// Components that serve a communicator of many processes before
	// coll/tuned when their priority is higher (self serves one process,
	// inter only intercommunicators, sync only wraps another).
	var above []string
	for _, c := range []string{"han", "adapt", "sm", "ucc", "hcoll", "cuda", "xhc", "acoll", "accelerator"} {
		if v := read("coll_" + c + "_priority"); v.found && v.n > s.tunedPri {
			above = append(above, fmt.Sprintf("coll/%s (priority %d)", c, v.n))
		}
	}
	sort.Strings(above)
	s.outrank = strings.Join(above, ", ")
	s.forced = map[string]cvar{}
	for _, name := range tunedName {
		s.forced[name] = read("coll_tuned_" + name + "_algorithm")
	}
	return s
}

// choice is what a row of collective c can say about MPI's algorithm.
func (s collSettings) choice(c measure.Collective) *results.AlgoChoice {
	switch c {
	case measure.SendRecv:
		return &results.AlgoChoice{Algo: "sendrecv", Source: "mpi backend: MPI_Sendrecv to the next rank"}
	case measure.HyperCube:
		return &results.AlgoChoice{Algo: "recursive doubling", Source: "mpi backend: log2(n) MPI_Sendrecv steps"}
	}
	name := tunedName[c]
	switch {
	case !s.readable:
		return &results.AlgoChoice{Algo: "auto", Source: "mpi backend: the MPI library chooses per call and does not say which (no coll/tuned settings to read)"}
	case s.outrank != "":
		return &results.AlgoChoice{Algo: "auto", Source: "mpi backend: " + s.outrank + " ranks above coll/tuned and does not say which algorithm it runs"}
	}
	if f := s.forced[name]; s.dynamic && f.found && f.n > 0 {
		algo := f.item
		if algo == "" {
			algo = fmt.Sprint(f.n)
		}
		return &results.AlgoChoice{Algo: strings.ReplaceAll(algo, "_", " "),
			Source: fmt.Sprintf("mpi backend: forced by coll_tuned_%s_algorithm=%d (Open MPI coll/tuned)", name, f.n)}
	}
	if s.dynamic && s.rules != "" {
		return &results.AlgoChoice{Algo: "rules file", Source: "mpi backend: Open MPI coll/tuned's rules in " + s.rules + " choose per size"}
	}
	return &results.AlgoChoice{Algo: "auto", Source: fmt.Sprintf("mpi backend: Open MPI coll/tuned's fixed rules choose per call; force one with --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_%s_algorithm N", name)}
}
