package doctor

import (
	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
)

// handRun is a doctor run put together by hand for a test: a meter over no
// world, with a site the test fills in, the outcomes its stages decided,
// and the verdict over both.
type handRun struct {
	*meter
	outcome
}

// newHandRun is a run of n ranks with options o, an empty site and report,
// and no outcome yet.
func newHandRun(n int, o Options) *handRun {
	s := &site{o: o, n: n, members: map[string][]int{}, devIndex: map[int]int{}, facts: map[string]*facts.HostFacts{}, peak: slowestNICPort(o.Facts)}
	return &handRun{meter: &meter{site: s, rank0: true, rep: &record.Report{}},
		outcome: outcome{slowRanks: map[int]rules.Suspect{}, slowPairs: map[string]rules.Suspect{}}}
}

// assemble reaches the verdict over what the run holds, into its report.
func (h *handRun) assemble() { applyVerdict(h.rep, reachVerdict(evidenceOf(h.meter, h.outcome))) }

// judging is the verdict being reached over what the run holds, for tests
// of one rule.
func (h *handRun) judging() *judging {
	return &judging{evidence: evidenceOf(h.meter, h.outcome), slowHosts: map[string]bool{}}
}
