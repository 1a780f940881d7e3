package watch

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// nvHost is a host's GPUs as the judge sees them: each process reads its
// GPU's NVLink counters every 250 ms; its operations' bound is job bytes
// per second each way, and the hardware counts what the job really moved
// (counted times the bound, with 4% of noise), plus what another program
// copies over the links (plants).
type nvHost struct {
	name    string
	gpus    int
	job     float64 // the job's bound each way, bytes per second, per process
	counted float64 // what the hardware counts of the bound
	procs   int     // processes per GPU (ranks sharing it): 1 where 0
	spans   bool
	plants  []nvPlant
}

// nvPlant copies rate bytes per second from GPU from to GPU to (-1: a GPU
// outside the job) from second on to second off.
type nvPlant struct {
	from, to int
	rate     float64
	on, off  float64
}

// nvEvent is a finding and when, in the job's seconds, it came.
type nvEvent struct {
	f  Finding
	at float64
}

// nvBus is GPU g's bus id on every host.
func nvBus(g int) string { return fmt.Sprintf("0000:%02X:00.0", 0x10+g) }

// plantRates is what the plants copy out of and into GPU g at second t.
func (h nvHost) plantRates(g int, t float64) (out, in float64) {
	for _, p := range h.plants {
		if t > p.on && t <= p.off {
			if p.from == g {
				out += p.rate
			}
			if p.to == g {
				in += p.rate
			}
		}
	}
	return out, in
}

// runNVLink feeds col every host's readings for secs seconds and returns
// what it named and cleared of GPUs (and fails on any other finding).
func runNVLink(t *testing.T, col *Collector, hosts []nvHost, secs float64, seed uint64) []nvEvent {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7)) //nolint:gosec // G404: a seeded model
	type counts struct{ tx, rx float64 }
	hw, job := map[string]*counts{}, map[string]*counts{}
	get := func(m map[string]*counts, k string) *counts {
		if m[k] == nil {
			m[k] = &counts{}
		}
		return m[k]
	}
	var events []nvEvent
	const step = 0.25
	seq := uint64(0)
	for now := step; now <= secs+1e-9; now += step {
		seq++
		for _, h := range hosts {
			per := max(h.procs, 1)
			for g := range h.gpus {
				out, in := h.plantRates(g, now)
				gpu := get(hw, fmt.Sprintf("%s/%d", h.name, g))
				noise := 1 + 0.04*(rng.Float64()-0.5)
				gpu.tx += (h.job*h.counted*float64(per)*noise + out) * step
				gpu.rx += (h.job*h.counted*float64(per)*noise + in) * step
				for k := range per {
					rank := g*per + k
					j := get(job, fmt.Sprintf("%s/%d", h.name, rank))
					j.tx += h.job * step
					j.rx += h.job * step
					at := int64(now*1e9) + rng.Int64N(int64(20*time.Millisecond))
					s := Summary{Comm: 0xc0ffee, Seq: seq, Ranks: h.gpus * per, Rank: rank, Host: h.name, GPU: nvBus(g), Func: "AllReduce",
						NVLink: &NVLinkSample{PID: 1000 + rank, AtNS: at, Read: true, TX: int64(gpu.tx), RX: int64(gpu.rx),
							JobTX: int64(j.tx), JobRX: int64(j.rx), Spans: h.spans}}
					for _, f := range col.Add(s) {
						if f.NVLink == nil {
							t.Fatalf("%.2f s: named %s", now, f)
						}
						events = append(events, nvEvent{f, now})
					}
				}
			}
		}
	}
	return events
}

// TestNVLinkCopyBetweenTwoGPUsIsNamed: another program copies from one of
// a job's GPUs to another over NVLink at 40 GB/s (the job's own traffic
// 40 GB/s each way per GPU, counted by the hardware at 1.1 times its
// bound, with noise; 4x H200's training step in the watch section moved
// about 50 GB/s each way per GPU clean, less when slowed) from second 3 to second 20: both GPUs are named,
// within 5 s, the sender with the receiver as its peer and the other way
// round, nobody else; neither is cleared while the copy runs, and both
// are once it has stopped. At the first pair, a middle one, the wrap
// (last to first) of 4 GPUs, across 8 GPUs, on 2 GPUs, on the second of two
// hosts, and on ranks that share their GPUs.
func TestNVLinkCopyBetweenTwoGPUsIsNamed(t *testing.T) {
	for _, c := range []struct {
		name         string
		gpus, procs  int
		from, to     int
		host, ofHost int
		seed         uint64
	}{
		{"4 GPUs, 0 to 1", 4, 1, 0, 1, 0, 1, 1},
		{"4 GPUs, 2 to 3", 4, 1, 2, 3, 0, 1, 2},
		{"4 GPUs, 3 to 0", 4, 1, 3, 0, 0, 1, 3},
		{"8 GPUs, 7 to 2", 8, 1, 7, 2, 0, 1, 4},
		{"2 GPUs, 1 to 0", 2, 1, 1, 0, 0, 1, 5},
		{"second of two hosts, 1 to 2", 4, 1, 1, 2, 1, 2, 6},
		{"two ranks per GPU, 0 to 3", 4, 2, 0, 3, 0, 1, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hosts []nvHost
			for h := range c.ofHost {
				hosts = append(hosts, nvHost{name: fmt.Sprintf("node%d", h), gpus: c.gpus, procs: c.procs, job: 40e9 / float64(c.procs), counted: 1.1})
			}
			hosts[c.host].plants = []nvPlant{{from: c.from, to: c.to, rate: 40e9, on: 3, off: 20}}
			events := runNVLink(t, New(Options{}), hosts, 30, c.seed)
			named := map[string]nvEvent{}
			for _, e := range events {
				if e.f.Host != hosts[c.host].name || (e.f.GPU != nvBus(c.from) && e.f.GPU != nvBus(c.to)) {
					t.Fatalf("named %s", e.f)
				}
				if !e.f.Cleared {
					if _, again := named[e.f.GPU]; again {
						t.Fatalf("named twice: %s", e.f)
					}
					named[e.f.GPU] = e
					if e.at > 3+5 {
						t.Errorf("named %.2f s after the copy began: %s", e.at-3, e.f)
					}
					continue
				}
				if e.at <= 20 {
					t.Errorf("cleared at %.2f s while the copy ran: %s", e.at, e.f)
				}
			}
			if len(named) != 2 || len(events) != 4 {
				t.Fatalf("named %d GPUs, %d events: %v", len(named), len(events), events)
			}
			out, in := named[nvBus(c.from)].f, named[nvBus(c.to)].f
			if v := out.NVLink; v.OutBps < 30e9 || v.OutBps > 50e9 || v.InBps > 5e9 || len(v.Peers) != 1 || v.Peers[0] != nvBus(c.to) {
				t.Errorf("the sender: %+v", *v)
			}
			if v := in.NVLink; v.InBps < 30e9 || v.InBps > 50e9 || v.OutBps > 5e9 || len(v.Peers) > 1 {
				t.Errorf("the receiver: %+v", *v)
			}
			for _, f := range []Finding{out, in} {
				if !strings.Contains(f.String(), string(CauseNVLink)) || !strings.Contains(f.Confirm(), "nvidia-smi") {
					t.Errorf("%s\n%s", f, f.Confirm())
				}
			}
			t.Logf("%s (%.2f s after the copy began)", out, named[nvBus(c.from)].at-3)
		})
	}
}

// TestNVLinkJobAloneNamesNobody: a job whose own traffic the hardware
// counts at up to 1.4 times its bound (LL's flags counted, a tree's extra
// hop), at 10 to 400 GB/s, on ranks that share their GPUs, or across hosts
// with much more than its bound counted (NCCL relaying through another
// GPU): nobody is named in a minute; the last is counted as not judged.
func TestNVLinkJobAloneNamesNobody(t *testing.T) {
	for _, h := range []nvHost{
		{name: "a", gpus: 4, job: 10e9, counted: 1.0},
		{name: "b", gpus: 8, job: 400e9, counted: 1.4},
		{name: "c", gpus: 2, job: 50e9, counted: 1.2},
		{name: "d", gpus: 4, procs: 3, job: 30e9, counted: 1.3},
		{name: "e", gpus: 8, job: 100e9, counted: 3, spans: true},
	} {
		col := New(Options{})
		if events := runNVLink(t, col, []nvHost{h}, 60, 1); len(events) > 0 {
			t.Errorf("host %s: %s", h.name, events[0].f)
		}
		n := col.NVLinkCounts()
		if n == nil || n.GPUs != h.gpus || (h.spans && n.Spans != h.gpus) || (!h.spans && n.Readings < int64(h.gpus*max(h.procs, 1)*200)) {
			t.Errorf("host %s: %+v", h.name, n)
		}
	}
}

// TestNVLinkBurstsAreNotNamed: a copy of 1 s every 4 s (a checkpoint's
// short bursts) is not named; one that then runs for good is, and is not
// cleared while it runs with gaps of half a second.
func TestNVLinkBurstsAreNotNamed(t *testing.T) {
	h := nvHost{name: "n", gpus: 4, job: 100e9, counted: 1.1}
	for s := 2.0; s < 20; s += 4 {
		h.plants = append(h.plants, nvPlant{from: 1, to: 2, rate: 60e9, on: s, off: s + 1})
	}
	for s := 24.0; s < 60; s += 3 {
		h.plants = append(h.plants, nvPlant{from: 1, to: 2, rate: 60e9, on: s, off: s + 2.5})
	}
	events := runNVLink(t, New(Options{}), []nvHost{h}, 60, 3)
	if len(events) != 2 {
		t.Fatalf("%d events: %v", len(events), events)
	}
	for _, e := range events {
		if e.f.Cleared || e.at < 24 || e.at > 30 {
			t.Errorf("at %.2f s: %s", e.at, e.f)
		}
	}
}

// TestNVLinkUnreadIsSaid: a process whose GPU's counters cannot be read
// says why; the collector keeps the first reason and names nobody.
func TestNVLinkUnreadIsSaid(t *testing.T) {
	col := New(Options{})
	s := Summary{Comm: 1, Seq: 1, Ranks: 2, Host: "vm", GPU: "0000:06:00.0", NVLink: &NVLinkSample{PID: 7, Unread: "GPU 0000:06:00.0 has no active NVLink"}}
	if fs := col.Add(s); len(fs) != 0 {
		t.Fatal(fs)
	}
	n := col.NVLinkCounts()
	if n == nil || n.GPUs != 0 || !strings.Contains(n.String(), "not read on vm: GPU 0000:06:00.0 has no active NVLink") {
		t.Fatalf("%+v", n)
	}
	if New(Options{}).NVLinkCounts() != nil {
		t.Error("counts of NVLink where nothing came")
	}
}

// TestNVLinkEveryFromEnv: the period the environment sets, and one line
// naming a malformed one.
func TestNVLinkEveryFromEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": NVLinkEveryDefault, "0": 0, "100": 100 * time.Millisecond, " 60000 ": time.Minute} {
		if got, err := NVLinkEveryFromEnv(func(string) string { return v }); err != nil || got != want {
			t.Errorf("%q: %v, %v", v, got, err)
		}
	}
	for _, v := range []string{"-1", "fast", "60001", "1.5"} {
		got, err := NVLinkEveryFromEnv(func(string) string { return v })
		if err == nil || got != 0 || !strings.Contains(err.Error(), EnvNVLinkEvery) {
			t.Errorf("%q: %v, %v", v, got, err)
		}
	}
}

// TestNVLinkEveryGPUOfAHostCopying: another program copies around a ring
// of a host's 4 GPUs (each to the next, 40 GB/s): every GPU carries as much
// beyond the job's bound out and in, so no GPU stands out from its peers;
// judged against the job's own bound, all four are named, each out and in,
// and none is cleared while the copies run. The host beside it, clean,
// names nobody.
func TestNVLinkEveryGPUOfAHostCopying(t *testing.T) {
	busy := nvHost{name: "busy", gpus: 4, job: 40e9, counted: 1.1}
	for g := range 4 {
		busy.plants = append(busy.plants, nvPlant{from: g, to: (g + 1) % 4, rate: 40e9, on: 2, off: 30})
	}
	events := runNVLink(t, New(Options{}), []nvHost{busy, {name: "clean", gpus: 4, job: 40e9, counted: 1.1}}, 30, 9)
	named := map[string]bool{}
	for _, e := range events {
		v := e.f.NVLink
		if e.f.Host != "busy" || e.f.Cleared || v.OutBps < 30e9 || v.InBps < 30e9 {
			t.Errorf("at %.2f s: %s", e.at, e.f)
		}
		named[e.f.GPU] = true
	}
	if len(named) != 4 || len(events) != 4 {
		t.Fatalf("named %d GPUs in %d events", len(named), len(events))
	}
	t.Logf("%s", events[0].f)
}
