package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/cpu"
	"collbench/bootstrap"
	"collbench/report"
	"collbench/results"
	"collbench/topology"
)

// NVMLFacts asks NVML about the GPUs; its error says why it could not.
func (f *System) NVMLFacts() (topology.Facts, error) {
	lib := f.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return topology.Facts{}, fmt.Errorf("NVML: %v (is the NVIDIA driver installed? libnvidia-ml.so.1 is part of it)", ret)
	}
	defer func() { _ = lib.Shutdown() }() // the facts are read; nothing depends on the shutdown
	facts, err := topology.FromNVML(lib)
	if err != nil {
		return facts, fmt.Errorf("NVML: %v", err)
	}
	return facts, nil
}

// ResultTopology is the topology summary placed beside benchmark results:
// NVML and sysfs only (no NCCL probe), for this host; nodes counts the
// distinct hosts of the world.
func (f *System) ResultTopology(hosts []string, ncclVersion string) *results.TopologySummary {
	in := topology.Inputs{Host: f.HostIdentity(), NCCLVersion: ncclVersion}
	if facts, err := f.NVMLFacts(); err == nil {
		in.Facts = &facts
	}
	if st, err := os.Stat("/sys/class"); err == nil && st.IsDir() {
		in.Sysfs = &topology.Sysfs{Root: "/"}
	}
	nodes := map[string]bool{}
	for _, h := range hosts {
		nodes[h] = true
	}
	return topology.Build(in).ResultSummary(len(nodes))
}

// CPUTopology describes where a cpu-backend run moved its data and the
// peak its busbw compares with: the NIC the ranks reach each other through
// when they span hosts; none on one host, where data moves through
// loopback and memory.
func (f *System) CPUTopology(ss *Session) *results.TopologySummary {
	nodes := map[string]bool{}
	for _, h := range ss.Hosts {
		nodes[h] = true
	}
	procs := "in one process"
	if ss.PW.Multi() {
		procs = fmt.Sprintf("in %d processes", ss.N)
	}
	hostsWord := "1 host"
	if len(nodes) > 1 {
		hostsWord = fmt.Sprintf("%d hosts", len(nodes))
	}
	s := &results.TopologySummary{Nodes: len(nodes), Summary: fmt.Sprintf("cpu backend, %d ranks %s on %s", ss.N, procs, hostsWord)}
	if len(nodes) <= 1 {
		s.PeakLabel = "none (the cpu backend on one host moves data through loopback and memory: no link to compare with)"
		return s
	}
	ip := ""
	if la, ok := ss.PW.Ctl.(cpu.LocalAddresser); ok {
		ip = la.LocalIP()
	}
	if p := net.ParseIP(ip); p != nil && p.IsLoopback() {
		s.PeakLabel = "none (the hosts reach each other through loopback, as simulated hosts on one machine: no NIC to compare with)"
		return s
	}
	ifname := interfaceOf(ip)
	var slowest *topology.NIC
	nics := (topology.Sysfs{Root: "/"}).NICs()
	for i, n := range nics {
		if n.RateGbps <= 0 {
			continue
		}
		if n.Name == ifname {
			s.PeakGBps = n.RateGbps / 8
			s.PeakLabel = fmt.Sprintf("NIC %s of %s, %.0f Gb/s, the slowest hop a rank's data takes off this host", n.Name, ip, n.RateGbps)
			return s
		}
		if slowest == nil || n.RateGbps < slowest.RateGbps {
			slowest = &nics[i]
		}
	}
	if slowest != nil {
		s.PeakGBps = slowest.RateGbps / 8
		s.PeakLabel = fmt.Sprintf("NIC %s, %.0f Gb/s, the slowest NIC of this host", slowest.Name, slowest.RateGbps)
		return s
	}
	s.PeakLabel = fmt.Sprintf("unknown (no speed is reported for the NIC of %s)", cmp.Or(ip, "this host"))
	return s
}

// interfaceOf names the network interface that holds ip.
func interfaceOf(ip string) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, inf := range ifs {
		addrs, _ := inf.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip {
				return inf.Name
			}
		}
	}
	return ""
}

// GatherTopologies, under a launcher, joins its world and gathers every
// process's host, fingerprint and summary on rank 0, one entry per host in
// rank order of its first process; rank0 says whether this process has
// them (and writes). A single process gets nil and true.
func (f *System) GatherTopologies(ctx context.Context, t *topology.Topology) (hosts []report.HostTopology, rank0 bool, err error) {
	launch, err := f.DetectLaunch()
	if err != nil || !launch.MultiProcess() {
		return nil, true, nil
	}
	pw, err := f.JoinProcesses(ctx, launch, commandArgs(f.Args), DefaultRunFlags().BootstrapTimeout, bootstrap.DefaultSilence)
	if err != nil {
		return nil, false, err
	}
	defer pw.Close()
	me, _ := json.Marshal(report.HostTopology{Host: t.Host, Ranks: []int{launch.Rank}, Fingerprint: t.Fingerprint, Summary: t.Summary})
	parts, err := pw.Ctl.AllGather(me)
	if err != nil {
		return nil, false, &RunError{Err: err}
	}
	if !pw.Rank0() {
		return nil, false, nil
	}
	at := map[string]int{}
	for r, p := range parts {
		var h report.HostTopology
		if err := json.Unmarshal(p, &h); err != nil || len(h.Ranks) != 1 || h.Ranks[0] != r {
			return nil, false, &RunError{Err: fmt.Errorf("rank %d sent a malformed topology", r)}
		}
		if i, ok := at[h.Host]; ok {
			hosts[i].Ranks = append(hosts[i].Ranks, r)
			continue
		}
		at[h.Host] = len(hosts)
		hosts = append(hosts, h)
	}
	return hosts, true, nil
}

// commandArgs is the command line without the program's name: what every
// process of a world must have been started with alike.
func commandArgs(args []string) []string {
	if len(args) == 0 {
		return nil
	}
	return args[1:]
}
