package engine

import (
	"context"

	"collbench/measure"
	"collbench/results"
)

// VerifyGroups checks the grouping semantics themselves: every collective
// inside each group of each layout, every value checked.
type VerifyGroups struct {
	Backend, NCCLLib string
	Ranks            int
	// RankLists are the layouts to check (measure.ParseLayout's words);
	// none: the default set for this world.
	RankLists []string
	Sizes     []int64
	Seed      uint64
	RunFlags
	Tool string // the version recorded in the result
	// OnReady, if set, runs once the backend is chosen, before any rank is
	// opened; rank0 says whether this process prints the result.
	OnReady func(choice BackendChoice, rank0 bool) error
}

// RunVerifyGroups runs v and returns the verification on rank 0 (nil on the
// other processes, and when refused before it started). A mismatch is a
// *CheckFailedError beside the full result.
func (f *System) RunVerifyGroups(ctx context.Context, v VerifyGroups) (_ *results.GroupVerification, err error) {
	gr, err := f.begin(ctx, v.Backend, v.NCCLLib, v.Ranks, v.RunFlags, nil)
	if err != nil {
		return nil, err
	}
	defer func() { gr.end(err) }()
	ss := gr.SS
	choice, b, n, pw, hosts := ss.Choice, ss.Choice.Backend, ss.N, ss.PW, ss.Hosts
	layouts := measure.DefaultLayouts(n, hosts)
	if len(v.RankLists) > 0 {
		layouts = nil
		for _, spec := range v.RankLists {
			l, err := measure.ParseLayout(spec, n, hosts)
			if err != nil {
				return nil, &UsageError{Err: err}
			}
			layouts = append(layouts, l)
		}
	}
	if v.OnReady != nil {
		if err := v.OnReady(choice, pw.Rank0()); err != nil {
			return nil, err
		}
	}
	if err := f.open(gr, v.RunFlags); err != nil {
		return nil, err
	}
	opts := measure.VerifyOptions{Sizes: v.Sizes, Seed: v.Seed}.DefaultVerify()
	lvs, runErr := measure.VerifyGroups(gr.Ctx, b, gr.World, layouts, hosts, opts)
	runErr = gr.settle(runErr, 0)
	res := &results.GroupVerification{Schema: "collbench/verify-groups", Tool: results.Tool{Name: "collbench", Version: v.Tool},
		Backend: b.Info(), Ranks: n, Layouts: lvs, OK: runErr == nil}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	for _, l := range lvs {
		for _, c := range l.Collectives {
			res.OK = res.OK && c.Pass
		}
	}
	ok := res.OK
	if !pw.Rank0() {
		res = nil
	}
	switch {
	case runErr != nil:
		return res, classify(runErr)
	case !ok:
		return res, &CheckFailedError{Msg: "verify-groups: some values did not match (see the mismatches above)"}
	}
	return res, nil
}
