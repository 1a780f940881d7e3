package mpi

import (
	"strings"
	"testing"

	"collbench/measure"
)

// fakeVars is a library's control variables for settingsFrom.
type fakeVars map[string]cvar

func (f fakeVars) read(name string) cvar { return f[name] }

func TestAlgorithmChoice(t *testing.T) {
	tuned := func(extra fakeVars) fakeVars {
		v := fakeVars{"coll_tuned_priority": {found: true, n: 30}, "coll_tuned_use_dynamic_rules": {found: true},
			"coll_han_priority": {found: true}, "coll_tuned_allreduce_algorithm": {found: true, item: "ignore"}}
		for k, x := range extra {
			v[k] = x
		}
		return v
	}
	on := cvar{found: true, n: 1}
	cases := []struct {
		name       string
		vars       fakeVars
		c          measure.Collective
		algo, says string
	}{
		{"not Open MPI", fakeVars{}, measure.AllReduce, "auto", "does not say which"},
		{"fixed rules", tuned(nil), measure.AllReduce, "auto", "--mca coll_tuned_allreduce_algorithm N"},
		{"reduce-scatter's own setting", tuned(nil), measure.ReduceScatter, "auto", "coll_tuned_reduce_scatter_block_algorithm"},
		{"forced", tuned(fakeVars{"coll_tuned_use_dynamic_rules": on, "coll_tuned_allreduce_algorithm": {found: true, n: 4, item: "ring"}}),
			measure.AllReduce, "ring", "forced by coll_tuned_allreduce_algorithm=4"},
		{"forced, words", tuned(fakeVars{"coll_tuned_use_dynamic_rules": on, "coll_tuned_bcast_algorithm": {found: true, n: 4, item: "split_binary_tree"}}),
			measure.Broadcast, "split binary tree", "coll_tuned_bcast_algorithm=4"},
		{"forced, no item name", tuned(fakeVars{"coll_tuned_use_dynamic_rules": on, "coll_tuned_gather_algorithm": {found: true, n: 2}}),
			measure.Gather, "2", "coll_tuned_gather_algorithm=2"},
		{"forced without dynamic rules does nothing", tuned(fakeVars{"coll_tuned_allreduce_algorithm": {found: true, n: 4, item: "ring"}}),
			measure.AllReduce, "auto", "fixed rules"},
		{"another collective forced", tuned(fakeVars{"coll_tuned_use_dynamic_rules": on, "coll_tuned_allreduce_algorithm": {found: true, n: 4, item: "ring"}}),
			measure.AllToAll, "auto", "fixed rules"},
		{"rules file", tuned(fakeVars{"coll_tuned_use_dynamic_rules": on, "coll_tuned_dynamic_rules_filename": {found: true, str: "/etc/rules.conf"}}),
			measure.AllReduce, "rules file", "/etc/rules.conf"},
		{"han outranks tuned", tuned(fakeVars{"coll_han_priority": {found: true, n: 35}}), measure.AllReduce, "auto", "coll/han (priority 35) ranks above coll/tuned"},
		{"sendrecv", fakeVars{}, measure.SendRecv, "sendrecv", "MPI_Sendrecv"},
		{"hypercube", tuned(nil), measure.HyperCube, "recursive doubling", "MPI_Sendrecv steps"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := settingsFrom(tc.vars.read).choice(tc.c)
			if got.Algo != tc.algo || !strings.Contains(got.Source, tc.says) {
				t.Errorf("%s: got %q (%s), want %q and %q", tc.c, got.Algo, got.Source, tc.algo, tc.says)
			}
		})
	}
}
