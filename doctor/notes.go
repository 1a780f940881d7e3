package doctor

import (
	"collbench/measure"
	"collbench/results"
)

// What the meter notes while it measures, for the verdict (observe.go):
// each rank's traffic, and the paths between hosts NCCL's proxy showed.

// tally adds to each rank's traffic in the running stage what measuring c
// at sizes on every group of l sends and receives: for each execution
// (warm-up, timed and checked), the bus bytes (NCCL's busbw convention:
// the bytes each rank puts on its link) each way it carries them, and for
// a group of one, the copy's read and write.
func (d *meter) tally(l measure.Layout, c measure.Collective, sizes []int64) {
	if d.seen.moved == nil {
		d.seen.moved = map[string]map[int]*traffic{}
	}
	m := d.seen.moved[d.stageName]
	if m == nil {
		m = map[int]*traffic{}
		d.seen.moved[d.stageName] = m
	}
	execs := float64(d.iters + d.o.Warmup + 1)
	// Each rank both sends and receives, except in a rooted one-way
	// collective, where each byte is either sent or received.
	dirs := 2.0
	if c == measure.Broadcast || c == measure.Reduce {
		dirs = 1
	}
	for _, g := range l.Groups {
		k := len(g)
		cross := false
		for _, r := range g {
			cross = cross || d.host(r) != d.host(g[0])
		}
		for _, sz := range sizes {
			bytes := float64(measure.GeometryFor(c, sz, 4, k, 0).Bytes)
			for _, r := range g {
				t := m[r]
				if t == nil {
					t = &traffic{}
					m[r] = t
				}
				switch {
				case k == 1:
					t.Local += 2 * bytes * execs
				case cross:
					t.Net += dirs * bytes * c.BusFactor(k) * execs
				default:
					t.Link += dirs * bytes * c.BusFactor(k) * execs
				}
			}
		}
	}
}

// notePaths adds the network steps a half recorded (rank 0 has every
// member's) to the stage's paths between hosts: sends only, by world rank.
func (d *meter) notePaths(stage string, group []int, k *results.KernelTimes) {
	if k == nil || len(k.Net) == 0 {
		return
	}
	if d.seen.paths == nil {
		d.seen.paths = map[pathKey]*pathSum{}
	}
	for i, steps := range k.Net {
		if i >= len(group) {
			break
		}
		for _, s := range steps {
			if !s.Send || s.WireUS <= 0 || s.Bytes <= 0 || s.Peer < 0 || s.Peer >= len(group) {
				continue
			}
			from, to := group[i], group[s.Peer]
			if d.host(from) == d.host(to) {
				continue
			}
			key := pathKey{stage, from, to}
			p := d.seen.paths[key]
			if p == nil {
				p = &pathSum{}
				d.seen.paths[key] = p
			}
			p.bytes += s.Bytes
			p.wireUS += s.WireUS
		}
	}
}
