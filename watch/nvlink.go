package watch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Another program that copies between two of a job's GPUs over NVLink
// slows every rank of the job alike: the link it loads is in every ring,
// no rank starts late, and NVLink has no proxy steps to time. What tells
// it apart is the GPU's own count of what its links carried: a job's
// processes read it (NVML's NVLink throughput counters) beside a bound of
// what their own operations put on those links, and a GPU whose links
// carry, persistently, well beyond that bound carries someone else's
// traffic.

// EnvNVLinkEvery is how often, in milliseconds, a job's processes read
// their GPUs' NVLink counters (NVLinkEveryDefault where unset; 0: never).
const EnvNVLinkEvery = "COLLBENCH_WATCH_NVLINK_MS"

// EnvNVML names the NVML library the processes load to read them (the
// system's libnvidia-ml.so.1 where unset).
const EnvNVML = "COLLBENCH_NVML_LIBRARY"

// NVLinkEveryDefault reads a GPU's counters four times a second.
const NVLinkEveryDefault = 250 * time.Millisecond

// NVLinkEveryFromEnv is the period EnvNVLinkEvery sets: the default where
// unset, 0 where it is 0, and 0 with an error naming it where it is not a
// whole number of milliseconds up to a minute.
func NVLinkEveryFromEnv(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv(EnvNVLinkEvery))
	if v == "" {
		return NVLinkEveryDefault, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 || ms > 60_000 {
		return 0, fmt.Errorf("%s=%q is not a whole number of milliseconds from 0 to 60000; NVLink traffic is not read, the job runs on", EnvNVLinkEvery, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// NVLinkSample is one process's reading of its GPU's NVLinks: the bytes
// they carried each way as the hardware counted them (summed over the
// active links), and at most what the process's own operations put on
// them (JobTX, JobRX: each operation's data by NCCL's algorithm and
// protocol, counted as NCCL was handed it), both since some start, at
// AtNS on the process's clock. Spans says a communicator of the process
// spans hosts (part of its traffic goes through NICs, NCCL may relay
// through another GPU: the GPU is not judged). Unread, alone, says why the
// GPU's counters cannot be read.
type NVLinkSample struct {
	PID          int    `json:",omitempty"`
	AtNS         int64  `json:",omitempty"`
	Read         bool   `json:",omitempty"`
	TX, RX       int64  `json:",omitempty"`
	JobTX, JobRX int64  `json:",omitempty"`
	Spans        bool   `json:",omitempty"`
	Unread       string `json:",omitempty"`
}

// NVLinkFinding is what a finding of traffic beyond the job's adds:
// how much went out and came in beyond the job's bound (the median over
// the readings that judged so, in bytes per second), what the hardware
// counted and the job's bound then, and the GPUs of the host where the
// other way's excess went or came from.
type NVLinkFinding struct {
	OutBps, InBps, CountedBps, JobBps float64
	Peers                             []string
}

// gpuKey is a GPU: its host and bus id (lower case).
type gpuKey struct{ host, bus string }

// gpuTraffic is what the collector holds of one GPU's readings.
type gpuTraffic struct {
	bus        string // as the sender spelled it
	comm       uint64 // a communicator and rank of a process on it: where its finding is filed
	rank       int
	procs      map[int]*procTraffic // by process id: ranks may share a GPU
	hist       []reading
	pending    onset
	named      *Finding
	spans      bool
	lastBadOut bool // the newest reading's excess, each way
	lastBadIn  bool
}

// procTraffic is one process's newest reading, and its job's rate each
// way over the interval that ended there.
type procTraffic struct {
	last         NVLinkSample
	jobTX, jobRX float64
}

// reading is one interval of a GPU: what its links carried each way per
// second, the job's bound, what went beyond it, and whether that is beyond
// the margin either way.
type reading struct {
	tx, rx, jobTX, jobRX, out, in float64
	bad, badOut, badIn            bool
}

// maxProcsPerGPU bounds the processes one GPU's readings are kept for.
const maxProcsPerGPU = 16

// addNVLink takes a summary's reading of its GPU, and returns the GPU
// named or cleared.
func (c *Collector) addNVLink(s Summary) []Finding {
	n := s.NVLink
	if n.Unread != "" {
		if c.nvUnread == "" {
			c.nvUnread = s.Host + ": " + n.Unread
		}
		return nil
	}
	if !n.Read || s.GPU == "" {
		return nil
	}
	key := gpuKey{s.Host, strings.ToLower(s.GPU)}
	g := c.gpus[key]
	if g == nil {
		if len(c.gpus) >= c.o.MaxGPUs {
			return nil
		}
		g = &gpuTraffic{bus: s.GPU, comm: s.Comm, rank: s.Rank, procs: map[int]*procTraffic{}}
		c.gpus[key] = g
		c.hostGPUs[key.host] = append(c.hostGPUs[key.host], g)
	}
	p := g.procs[n.PID]
	if p == nil {
		if len(g.procs) < maxProcsPerGPU {
			g.procs[n.PID] = &procTraffic{last: *n}
		}
		return nil
	}
	dt := n.AtNS - p.last.AtNS
	if dt < (50 * time.Millisecond).Nanoseconds() {
		return nil // too close to the last to tell a rate: the next one will
	}
	prev := p.last
	p.last = *n
	d := [4]int64{n.TX - prev.TX, n.RX - prev.RX, n.JobTX - prev.JobTX, n.JobRX - prev.JobRX}
	if slices.Min(d[:]) < 0 {
		return nil // counters started again (a new process with the same id, a driver reload)
	}
	secs := float64(dt) / 1e9
	p.jobTX, p.jobRX = float64(d[2])/secs, float64(d[3])/secs
	if n.Spans || g.spans {
		if !g.spans {
			g.spans = true
			c.nvSpans++
		}
		return nil
	}
	r := reading{tx: float64(d[0]) / secs, rx: float64(d[1]) / secs}
	for pid, q := range g.procs {
		// Ranks that share the GPU: the hardware counted theirs too.
		if pid == n.PID || n.AtNS-q.last.AtNS > (5*time.Second).Nanoseconds() {
			continue
		}
		r.jobTX += q.jobTX
		r.jobRX += q.jobRX
	}
	r.jobTX += p.jobTX
	r.jobRX += p.jobRX
	r.out, r.in = r.tx-r.jobTX, r.rx-r.jobRX
	r.badOut = r.tx-c.o.NVLinkMargin*r.jobTX >= c.o.MinForeignBps
	r.badIn = r.rx-c.o.NVLinkMargin*r.jobRX >= c.o.MinForeignBps
	r.bad = r.badOut || r.badIn
	g.lastBadOut, g.lastBadIn = r.badOut, r.badIn
	g.hist = append(g.hist, r)
	if len(g.hist) > c.o.NVLinkWindow {
		g.hist = g.hist[len(g.hist)-c.o.NVLinkWindow:]
	}
	c.nvReadings++
	return c.updateGPU(key, g, n.AtNS)
}

// updateGPU names g where Share of a full window of its readings went
// beyond the job's bound for Persist, and clears it as a rank is cleared.
func (c *Collector) updateGPU(key gpuKey, g *gpuTraffic, now int64) []Finding {
	var bad []reading
	for _, r := range g.hist {
		if r.bad {
			bad = append(bad, r)
		}
	}
	name, clear := c.verdictOf(g.named != nil, len(bad), len(g.hist), c.o.NVLinkWindow, &g.pending, now, func() uint64 { return 0 })
	switch {
	case name:
		// Each way's excess is said where most of the readings that
		// named the GPU had it beyond the margin: the other way's is the
		// job's own traffic counted a little above its bound.
		med := func(f func(reading) float64, way func(reading) bool) float64 {
			var v []float64
			for _, r := range bad {
				if way(r) {
					v = append(v, f(r))
				}
			}
			if len(v)*2 < len(bad) {
				return 0
			}
			slices.Sort(v)
			return max(v[len(v)/2], 0)
		}
		all := func(reading) bool { return true }
		nf := &NVLinkFinding{OutBps: med(func(r reading) float64 { return r.out }, func(r reading) bool { return r.badOut }),
			InBps:      med(func(r reading) float64 { return r.in }, func(r reading) bool { return r.badIn }),
			CountedBps: med(func(r reading) float64 { return max(r.tx, r.rx) }, all), JobBps: med(func(r reading) float64 { return max(r.jobTX, r.jobRX) }, all)}
		out := nf.OutBps >= nf.InBps
		for _, o := range c.hostGPUs[key.host] {
			if o != g && ((out && o.lastBadIn) || (!out && o.lastBadOut)) {
				nf.Peers = append(nf.Peers, o.bus)
			}
		}
		slices.Sort(nf.Peers)
		f := &Finding{Comm: g.comm, Rank: g.rank, Host: key.host, GPU: g.bus, Cause: CauseNVLink, Late: len(bad), Of: len(g.hist), NVLink: nf}
		g.named = f
		return []Finding{*f}
	case clear:
		f := *g.named
		f.Cleared = true
		g.named = nil
		return []Finding{f}
	}
	return nil
}

// standingGPUs are the GPUs named now.
func (c *Collector) standingGPUs() []Finding {
	var out []Finding
	for _, g := range c.gpus {
		if g.named != nil {
			out = append(out, *g.named)
		}
	}
	return out
}

// nvlinkString is a finding of NVLink traffic as collbench watch prints it.
func (f Finding) nvlinkString() string {
	where := fmt.Sprintf("GPU %s on %s (rank %d of communicator %016x)", f.GPU, f.Host, f.Rank, f.Comm)
	if f.Cleared {
		return fmt.Sprintf("cleared: %s: its NVLinks no longer carry traffic beyond the job's", where)
	}
	v := f.NVLink
	way, one, many := fmt.Sprintf("%s out", gbps(v.OutBps)), "takes in", "take in"
	switch {
	case v.InBps > v.OutBps && v.OutBps > 0:
		way, one, many = fmt.Sprintf("%s in and %s out", gbps(v.InBps), gbps(v.OutBps)), "sends", "send"
	case v.InBps > v.OutBps:
		way, one, many = fmt.Sprintf("%s in", gbps(v.InBps)), "sends", "send"
	case v.InBps > 0:
		way = fmt.Sprintf("%s out and %s in", gbps(v.OutBps), gbps(v.InBps))
	}
	s := fmt.Sprintf("%s: %s, %s beyond what the job's operations can put on them (the links counted %s, the job's bound %s), in %d of its last %d readings",
		where, CauseNVLink, way, gbps(v.CountedBps), gbps(v.JobBps), f.Late, f.Of)
	switch len(v.Peers) {
	case 0:
		return s + "; no other GPU of the job on this host shows the other end: a GPU outside the job, or a copy both ways"
	case 1:
		return s + fmt.Sprintf("; GPU %s %s as much: another program copies between them, or the job does outside NCCL", v.Peers[0], one)
	}
	return s + fmt.Sprintf("; GPUs %s %s as much: another program copies between them, or the job does outside NCCL", strings.Join(v.Peers, ", "), many)
}

// nvlinkConfirm is what to run on the host of a GPU named for traffic
// beyond the job's.
func (f Finding) nvlinkConfirm() string {
	gpus := append([]string{f.GPU}, f.NVLink.Peers...)
	return fmt.Sprintf("on %s: list what else runs on GPU %s (nvidia-smi --query-compute-apps=pid,process_name,gpu_bus_id --format=csv): a process there copies over NVLink (stop it, or give the job GPUs it does not share); where only the job's processes run there, it moves data between GPUs outside NCCL",
		f.Host, strings.Join(gpus, " and "))
}

// gbps is a rate in GB/s.
func gbps(bps float64) string { return fmt.Sprintf("%.1f GB/s", bps/1e9) }

// NVLinkCounts is what came of the GPUs' NVLink readings: the GPUs read,
// the readings judged, the GPUs not judged because a communicator of
// theirs spans hosts, and the first reason a GPU could not be read.
type NVLinkCounts struct {
	GPUs     int    `json:"gpus_read"`
	Readings int64  `json:"readings_judged"`
	Spans    int    `json:"gpus_across_hosts,omitempty"`
	Unread   string `json:"unread,omitempty"`
}

// NVLinkCounts says what came of the NVLink readings, or nil where none
// came.
func (c *Collector) NVLinkCounts() *NVLinkCounts {
	if len(c.gpus) == 0 && c.nvUnread == "" {
		return nil
	}
	return &NVLinkCounts{GPUs: len(c.gpus), Readings: c.nvReadings, Spans: c.nvSpans, Unread: c.nvUnread}
}

// String says it in a few words, for watch's last line.
func (n *NVLinkCounts) String() string {
	s := fmt.Sprintf("NVLink traffic read on %d GPUs (%d readings judged", n.GPUs, n.Readings)
	if n.Spans > 0 {
		s += fmt.Sprintf(", %d GPUs not judged: a communicator of theirs spans hosts", n.Spans)
	}
	s += ")"
	if n.Unread != "" {
		s += "; not read on " + n.Unread
	}
	return s
}
