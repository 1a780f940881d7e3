package nccl

import (
	"strings"

	"golang.org/x/sys/unix"

	"collbench/topology"
)

// placement is the CPUs a GPU's thread runs on: those local to the GPU
// (its PCI function's local_cpulist in sysfs) that the process may run on.
// It is nil where sysfs does not say, or where the process may run on none
// of them (a launcher bound it elsewhere: that binding stands).
func placement(local string, allowed []int) []int {
	cpus, err := topology.ParseCPUList(local)
	if err != nil || len(cpus) == 0 {
		return nil
	}
	ok := make(map[int]bool, len(allowed))
	for _, c := range allowed {
		ok[c] = true
	}
	var out []int
	for _, c := range cpus {
		if ok[c] {
			out = append(out, c)
		}
	}
	return out
}

// sysBus is a PCI bus id as sysfs names it: a four-digit domain, in lower
// case (CUDA and NVML may give eight digits, or capitals).
func sysBus(id string) string {
	id = strings.ToLower(id)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) == 8 {
		id = dom[4:] + ":" + rest
	}
	return id
}

// allowedCPUs is the CPUs the calling thread may run on, nil if unknown.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// pin binds the calling thread (a worker's locked thread) to cpus.
func pin(cpus []int) error {
	var set unix.CPUSet
	set.Zero()
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(0, &set)
}

// place binds each local rank's thread to the CPUs local to its GPU. It
// runs once the communicators exist: NCCL places its own threads while it
// creates them, from the creating thread's binding, and one thread creates
// every local communicator.
func (w *world) place() {
	allowed := allowedCPUs()
	sys := topology.Sysfs{Root: w.b.sysRoot}
	for _, r := range w.ranks {
		cpus := placement(sys.CPUList(sysBus(r.dev.busID)), allowed)
		if len(cpus) == 0 {
			continue
		}
		if r.wk.do(func() error { return pin(cpus) }) == nil {
			r.cpus = topology.FormatCPUList(cpus)
		}
	}
}
