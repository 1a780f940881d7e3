package fakegpu

import (
	"math"
	"math/rand"
	"sync"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
)

// Model makes the machine's work take the time a modeled machine would
// take, on a virtual clock per stream, instead of the host's: events read
// the virtual clock (seconds, as a float: no rounding at any size), so doctor and the benchmarks measure the model (its
// healthy rates, their spread and the faults planted in it) at any size,
// whatever the host is doing. Data still moves and is verified.
type Model struct {
	// Seed drives the spread of every duration.
	Seed int64
	// Healthy rates, from the machine's own limits: a copy reaches
	// CopyShare of half the memory bandwidth, the fill kernel
	// FillPerCoreCycle elements per CUDA core and SM cycle, a pair of GPUs
	// LinkShare of their NVLinks' peak (26.5625 GB/s per link and
	// direction, the fewer active links of the two).
	CopyShare, FillPerCoreCycle, LinkShare float64
	// LatencyUS is the fixed time of every collective and exchange.
	LatencyUS float64
	// CopySpread, FillSpread and LinkSpread are the relative standard
	// deviations of the copy, fill and link durations.
	CopySpread, FillSpread, LinkSpread float64
	// CopyFactor and FillFactor slow GPUs (0.5: half speed); LinkFactor a
	// pair of GPUs' link (key: the lower GPU index first).
	CopyFactor, FillFactor map[int]float64
	LinkFactor             map[[2]int]float64
	// Shared time-slices GPUs with a foreign workload, as the driver does
	// between processes: the machine's work on GPU k runs only in the first
	// Shared[k] of every period of SliceUS/Shared[k] (its own slice), and an
	// event the stream reaches in the foreign part reads the start of its
	// next slice. One kernel timed by its events fits a slice and runs at
	// full speed; a loop of them spanning many slices gets Shared[k] of it.
	Shared map[int]float64
	// SliceUS is the driver's time slice; 2000 when 0.
	SliceUS float64
	// Protocols gives NCCL's protocols their costs (protocolTime), so the
	// algorithm and protocol a collective runs with change its time: a
	// space with a known best for collbench tune. Off, every choice runs
	// at the link's rate.
	Protocols bool
	// CacheBytes is each GPU's L2 cache: a collective whose every rank
	// runs it on the same buffers as its GPU's last collective, its send
	// and receive bytes within CacheBytes, finds them in the cache and
	// takes CachedFactor of its time (NCCL's benchmark moves its buffers
	// between repetitions so that none does). 0: no cache.
	CacheBytes   int64
	CachedFactor float64
	// ForcedFactor, where set, is the share of its time a collective
	// takes when a tuner plugin forced its choice, even to the one NCCL
	// runs anyway: two cells of one configuration that differ in time, as
	// small messages on the lent GPUs do. On 2x H200 (NCCL 2.28.3) such
	// twins were within 1% of each other from 2 MiB up (but one, 4%) and
	// 0.7-1.4x apart below; allreduce at 128 KiB forced to ring/LL, which
	// NCCL ran on the 16 channels of its own choice, was faster than
	// unforced in 4 of 5 pairs (7.8-8.2 µs against 7.9-9.8 µs).
	ForcedFactor float64
	// ChunkCost, where set, makes the chunk size matter where NCCL asks
	// the tuner for it (2.30 and later): a transfer takes 1 + ChunkCost
	// times |log2(chunk / best)| of its time, where the best chunk is
	// twice what NCCL computes from 1 MiB up and NCCL's own below: a known
	// best for collbench tune's chunk sizes.
	ChunkCost float64
	// ColdOps and ColdUS make a communicator's first operations slow:
	// each of its first ColdOps collectives takes ColdUS more, as the lent
	// GPUs' first operations do (4x H200, NCCL 2.28.3: a sweep's first
	// allreduce of 8 B 28-30 µs against 10-12 later, before the world's
	// warm-up; tune's first 30.5 µs against 10.9-12.4 in its repeats).
	ColdOps int
	ColdUS  float64
}

// chunkFactor is what the chunk size costs a transfer of size bytes
// (Model.ChunkCost): 1 where the model or NCCL leaves it out.
func (c *clock) chunkFactor(ch choice, size int64) float64 {
	if c.m.ChunkCost <= 0 || ch.chunk <= 0 || ch.chunkNCCL <= 0 {
		return 1
	}
	best := float64(ch.chunkNCCL)
	if size >= 1<<20 {
		best *= 2
	}
	return 1 + c.m.ChunkCost*math.Abs(math.Log2(float64(ch.chunk)/best))
}

// HealthyModel is a model of healthy Hopper GPUs as measured on the lent
// H100 and H200 (docs/doctor.md): copies at 0.89 of half the memory
// bandwidth with 0.3% spread, the fill kernel at 0.00521 elements per core
// and cycle with 0.5%, pairs at 72% of the NVLink peak with 2%, no fixed
// latency (the sizes a model runs at stand for large messages).
func HealthyModel(seed int64) *Model {
	return &Model{Seed: seed, CopyShare: 0.89, FillPerCoreCycle: 0.00521, LinkShare: 0.72, LatencyUS: 0,
		CopySpread: 0.003, FillSpread: 0.005, LinkSpread: 0.02}
}

// clock is the model's state in a running machine.
type clock struct {
	m   *Model
	d   *Driver
	mu  sync.Mutex
	rng *rand.Rand
	// last are the buffers of each GPU's last collective (CacheBytes).
	last map[int][2]cuda.DevPtr
}

// cacheUse is one rank's part of a collective, as the cache sees it.
type cacheUse struct {
	dev        int
	send, recv cuda.DevPtr
	bytes      int64
}

// cached is the factor of a collective's time that its ranks' uses leave:
// CachedFactor where every rank's buffers are its GPU's last collective's
// and fit in the cache, else 1. It records the uses as each GPU's last.
func (c *clock) cached(uses []cacheUse) float64 {
	if c.m.CacheBytes <= 0 {
		return 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[int][2]cuda.DevPtr{}
	}
	hit := true
	for _, u := range uses {
		k := [2]cuda.DevPtr{u.send, u.recv}
		hit = hit && u.bytes <= c.m.CacheBytes && c.last[u.dev] == k
		c.last[u.dev] = k
	}
	if hit && c.m.CachedFactor > 0 {
		return c.m.CachedFactor
	}
	return 1
}

func newClock(d *Driver, m *Model) *clock {
	return &clock{m: m, d: d, rng: rand.New(rand.NewSource(m.Seed))} //nolint:gosec // G404: a seeded model, not security
}

// spread is a factor around 1 with relative deviation sd.
func (c *clock) spread(sd float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(0.5, 1+sd*c.rng.NormFloat64())
}

func factor(m map[int]float64, k int) float64 {
	if f, ok := m[k]; ok && f > 0 {
		return f
	}
	return 1
}

// slice is dev's own slice and period in seconds; ok is false for a GPU
// the machine has to itself.
func (c *clock) slice(dev int) (own, period float64, ok bool) {
	sh, found := c.m.Shared[dev]
	if !found || sh <= 0 || sh >= 1 {
		return 0, 0, false
	}
	own = c.m.SliceUS * 1e-6
	if own <= 0 {
		own = 2e-3
	}
	return own, own / sh, true
}

// busy is when work of d seconds on dev that is ready at t ends: at once
// on a GPU of its own, in its own slices on a shared one.
func (c *clock) busy(dev int, t, d float64) float64 {
	own, period, ok := c.slice(dev)
	if !ok {
		return t + d
	}
	// Period k holds its own slice [k*period, k*period+own); k counts up
	// on its own, so rounding never holds t at a period's edge.
	k := math.Floor(t / period)
	for {
		start, end := k*period, k*period+own
		if t < start {
			t = start
		}
		if t < end {
			run := min(d, end-t)
			t, d = t+run, d-run
			if d <= 0 {
				return t
			}
		}
		k++
	}
}

// reach is when a stream that is ready at t on dev reaches its next
// command: t, or the start of its next slice on a shared GPU.
func (c *clock) reach(dev int, t float64) float64 {
	own, period, ok := c.slice(dev)
	if !ok {
		return t
	}
	if k := math.Floor(t / period); t-k*period >= own {
		return (k + 1) * period
	}
	return t
}

// copyGBps is GPU dev's copy rate.
func (c *clock) copyGBps(dev int) float64 {
	g := c.d.m.GPUs[dev]
	bw := float64(g.MemBusWidth) / 8 * float64(g.MemClockMaxMHz) * 1e6 * 2 / 1e9
	return bw / 2 * c.m.CopyShare * factor(c.m.CopyFactor, dev)
}

// fillGelem is GPU dev's fill (and check) kernel rate.
func (c *clock) fillGelem(dev int) float64 {
	g := c.d.m.GPUs[dev]
	return float64(g.Cores) * float64(g.SMClockMaxMHz) * 1e6 * c.m.FillPerCoreCycle / 1e9 * factor(c.m.FillFactor, dev)
}

// linkGBps is the rate between GPUs a and b, one way.
func (c *clock) linkGBps(a, b int) float64 {
	if a == b {
		return c.copyGBps(a)
	}
	ga, gb := c.d.m.GPUs[a], c.d.m.GPUs[b]
	links := min(ga.ActiveLinks, gb.ActiveLinks)
	key := [2]int{min(a, b), max(a, b)}
	f := 1.0
	if v, ok := c.m.LinkFactor[key]; ok && v > 0 {
		f = v
	}
	return float64(links) * 26.5625 * c.m.LinkShare * f
}

// copyTime is bytes copied on dev (read and written).
func (c *clock) copyTime(dev int, bytes int64) float64 {
	return float64(bytes) / (c.copyGBps(dev) * 1e9) * c.spread(c.m.CopySpread)
}

// kernelTime is count elements through the fill or check kernel on dev.
func (c *clock) kernelTime(dev int, count int64) float64 {
	return float64(count) / (c.fillGelem(dev) * 1e9) * c.spread(c.m.FillSpread)
}

// sendTime is bytes from GPU a to GPU b.
func (c *clock) sendTime(a, b int, bytes int64) float64 {
	return c.m.LatencyUS*1e-6 + float64(bytes)/(c.linkGBps(a, b)*1e9)*c.spread(c.m.LinkSpread)
}

// collectiveTime is a collective of kind over the GPUs devs (in rank
// order) of count elements of esz bytes: its bus bytes at the slowest link
// of the ring; in a communicator of one, a copy.
func (c *clock) collectiveTime(kind driver.OpKind, devs []int, count, esz int64, ch choice) float64 {
	k := int64(len(devs))
	s := count * esz
	if k == 1 {
		if kind == driver.AllReduce || kind == driver.Broadcast || kind == driver.Reduce || kind == driver.AllGather ||
			kind == driver.ReduceScatter || kind == driver.AllToAll || kind == driver.Gather || kind == driver.Scatter {
			return c.copyTime(devs[0], s)
		}
	}
	var bus float64
	switch kind {
	case driver.AllReduce:
		bus = float64(2*(k-1)) / float64(k) * float64(s)
	case driver.Broadcast, driver.Reduce:
		bus = float64(s)
	default: // allgather, reduce-scatter, alltoall, gather, scatter: count per rank
		bus = float64(k-1) / float64(k) * float64(s*k)
	}
	rate := 0.0
	for i := range devs {
		r := c.linkGBps(devs[i], devs[(i+1)%len(devs)])
		if rate == 0 || r < rate {
			rate = r
		}
	}
	t := c.m.LatencyUS*1e-6 + c.protocolTime(ch.proto, bus/(rate*1e9)*c.spread(c.m.LinkSpread)*c.chunkFactor(ch, s))
	if ch.forced && c.m.ForcedFactor > 0 {
		t *= c.m.ForcedFactor
	}
	return t
}
