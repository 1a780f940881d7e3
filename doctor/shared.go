package doctor

import (
	"fmt"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/internal/words"
)

// IdleBusyPct is the utilisation a GPU must keep all through doctor's idle
// window (IdleStage, before any stage runs) to count as busy with another
// workload: a clean GPU reads 0 there, one running a copy or compute loop
// near 100.
const IdleBusyPct = 50

// sharing is what shows that another workload used a rank's GPU while
// doctor measured it: the processes NVML listed that are not this world's,
// and the utilisation while doctor ran nothing.
type sharing struct {
	procs []facts.GPUProcess
	// hidden counts listed processes that cannot be told from this run's
	// own (NVML's pids are another pid namespace's).
	hidden       int
	idleMin      int
	idleBusy     bool
	idleExamined bool
}

func (s sharing) any() bool { return len(s.procs) > 0 || s.hidden > 0 || s.idleBusy }

// words says who shared the GPU: each foreign process (pid, name, memory),
// or how busy it was while doctor idled.
func (s sharing) words() string {
	var them []string
	for _, p := range s.procs {
		t := fmt.Sprintf("pid %d", p.PID)
		if p.Name != "" {
			t += " (" + p.Name + ")"
		}
		if p.MemBytes > 0 {
			t += fmt.Sprintf(", %s of its memory", words.Bytes(int64(p.MemBytes>>20<<20))) //nolint:gosec // G115: GPU memory is far below 2^63 bytes
		}
		them = append(them, t)
	}
	if s.hidden > 0 {
		them = append(them, fmt.Sprintf("%d process(es) NVML lists under pids of another pid namespace", s.hidden))
	}
	out := ""
	if len(them) > 0 {
		out = "another workload runs on it: " + strings.Join(them, "; ")
	}
	if s.idleBusy {
		busy := fmt.Sprintf("it was at least %d%% busy while doctor ran nothing on it", s.idleMin)
		if out == "" {
			out = "another workload runs on it (one NVML does not list, e.g. in another container): " + busy
		} else {
			out += "; " + busy
		}
	}
	return out
}

// shared gathers what shows another workload on rank r's GPU: the facts'
// processes and those sampled in every stage, less this world's own, and
// the idle window's utilisation.
func (d *judging) shared(r int) sharing {
	var s sharing
	g, ok := d.health(r)
	if !ok {
		return s
	}
	host := d.host(r)
	var ours []uint32
	if f := d.facts[host]; f != nil {
		ours = f.Ours
	}
	listed := append([]facts.GPUProcess(nil), g.Processes...)
	for _, smp := range d.samples {
		if smp.Host != host || smp.GPU != g.Index {
			continue
		}
		for _, p := range smp.Processes {
			if !slices.ContainsFunc(listed, func(q facts.GPUProcess) bool { return q.PID == p.PID }) {
				listed = append(listed, p)
			}
		}
		if smp.Stage == facts.IdleStage && smp.Samples > 0 {
			s.idleExamined, s.idleMin = true, smp.UtilMinPct
			s.idleBusy = smp.UtilMinPct >= IdleBusyPct
		}
	}
	mine := 0
	for _, p := range listed {
		if slices.Contains(ours, p.PID) {
			mine++
		} else {
			s.procs = append(s.procs, p)
		}
	}
	if mine == 0 && len(ours) > 0 && len(s.procs) > 0 {
		// None of the pids is this run's, though it drives the GPU: they
		// are another namespace's, and one of them is ours.
		s.hidden, s.procs = len(s.procs)-1, nil
	}
	return s
}

// sharedFindings warns of every GPU another workload shared while doctor
// measured it and whose figures still held (a slowed one is a FAIL whose
// cause names the workload): its figures were measured with less than the
// whole GPU.
func (d *judging) sharedFindings(failed func(r int) bool) []record.Finding {
	var out []record.Finding
	for r := 0; r < d.n; r++ {
		if failed(r) {
			continue
		}
		s := d.shared(r)
		if !s.any() {
			continue
		}
		out = append(out, record.Finding{Severity: "WARN", Stage: "gpu", Kind: "shared-gpu", Part: d.o.Who(r), Host: d.host(r), Ranks: []int{r},
			Msg:   "measured while shared: " + s.words() + "; its figures held nonetheless",
			Cause: "the figures may understate what it does alone: measure it again once the workload is gone"})
	}
	return out
}
