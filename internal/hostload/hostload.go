// Package hostload measures how much of the host's CPU time went to
// others while a run measured: other processes, and the hypervisor's steal.
// A run that shared its host is slower for reasons no comparison of its
// rows can tell from a regression; compare reads this to say so.
package hostload

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Sample is a reading of the host's and this process's CPU time, in clock
// ticks.
type Sample struct {
	total, busy, steal, self uint64
	ok                       bool
}

// Load is what went to others between two samples, in percent of the
// host's CPU capacity over that time.
type Load struct {
	OthersPct float64 `json:"others_pct"` // other processes on the host
	StealPct  float64 `json:"steal_pct"`  // the hypervisor's other guests
	CPUs      int     `json:"cpus"`
}

// Take reads the host's and this process's CPU times; the sample is empty
// where /proc cannot be read (not Linux).
func Take() Sample {
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Sample{}
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return Sample{}
	}
	return parse(string(st), string(self))
}

// parse reads /proc/stat's "cpu" line and /proc/self/stat's utime and stime.
func parse(stat, self string) Sample {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return Sample{}
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return Sample{}
		}
		v[i] = n
	}
	// user nice system idle iowait irq softirq steal
	s := Sample{busy: v[0] + v[1] + v[2] + v[5] + v[6], steal: v[7], ok: true}
	s.total = s.busy + v[3] + v[4] + s.steal
	// The command may hold spaces and parentheses: fields count from the
	// last ')'. utime and stime are fields 14 and 15, so the 12th and 13th
	// after it.
	i := strings.LastIndexByte(self, ')')
	if i < 0 {
		return Sample{}
	}
	g := strings.Fields(self[i+1:])
	if len(g) < 13 {
		return Sample{}
	}
	u, err1 := strconv.ParseUint(g[11], 10, 64)
	k, err2 := strconv.ParseUint(g[12], 10, 64)
	if err1 != nil || err2 != nil {
		return Sample{}
	}
	s.self = u + k
	return s
}

// Since is what went to others from a to b; false where either sample is
// empty or no time passed.
func Since(a, b Sample) (Load, bool) {
	if !a.ok || !b.ok || b.total <= a.total {
		return Load{}, false
	}
	total := float64(b.total - a.total)
	others := float64(b.busy-a.busy) - float64(b.self-a.self)
	if others < 0 {
		others = 0
	}
	round := func(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
	return Load{OthersPct: round(100 * others / total), StealPct: round(100 * float64(b.steal-a.steal) / total), CPUs: runtime.NumCPU()}, true
}
