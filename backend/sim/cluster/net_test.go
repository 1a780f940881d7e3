package cluster

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func testModel(hosts, perLeaf int) *Model {
	m := Defaults()
	m.Hosts, m.Fabric.HostsPerLeaf = hosts, perLeaf
	m.NIC.LatencyUS, m.NVLink.LatencyUS, m.Fabric.LatencyUS = 0, 0, 0
	return &m
}

// TestOpTimes checks the cost model's cases against hand-worked figures.
func TestOpTimes(t *testing.T) {
	const mib = 1 << 20
	m := testModel(8, 2)
	n := NewNet(m)
	by := float64(64 * mib)
	// A pair across hosts both ways: the NIC's rate.
	tm := n.OpTimes(Shift, [][]int{{0, 8}}, 64*mib)
	if want := by / (m.NIC.GBps * 1e3); !near(tm.US[0], want) {
		t.Errorf("pair across hosts: %v µs, want %v", tm.US[0], want)
	}
	// Within a host: NVLink's.
	tm = n.OpTimes(Shift, [][]int{{0, 1}}, 64*mib)
	if want := by / (m.NVLink.GBps * 1e3); !near(tm.US[0], want) {
		t.Errorf("pair within a host: %v µs, want %v", tm.US[0], want)
	}
	// Alone: the copy rate.
	tm = n.OpTimes(Chain, [][]int{{3}}, 64*mib)
	if want := by / (m.GPU.CopyGBps * 1e3); !near(tm.US[0], want) {
		t.Errorf("alone: %v µs, want %v", tm.US[0], want)
	}
	// Two pairs on different rails do not share a link.
	one := n.OpTimes(Shift, [][]int{{0, 8}}, 64*mib)
	two := n.OpTimes(Shift, [][]int{{0, 8}, {1, 9}}, 64*mib)
	if !near(two.US[0], one.US[0]) || !near(two.US[1], one.US[0]) {
		t.Errorf("two pairs on different rails: %v, want each as fast as one alone (%v)", two.US, one.US[0])
	}
}

// TestUplinkSharing: with oversubscription 2, a leaf's hosts all sending
// toward another leaf at once get half the NIC's rate; a slow uplink slows
// only its own spine's rails.
func TestUplinkSharing(t *testing.T) {
	const mib = 1 << 20
	m := testModel(4, 2)
	m.Fabric.Oversubscription = 2
	n := NewNet(m)
	g := m.GPUsPerHost
	var groups [][]int
	for h := 0; h < 2; h++ {
		for x := 0; x < g; x++ {
			groups = append(groups, []int{h*g + x, (h+2)*g + x})
		}
	}
	tm := n.OpTimes(Shift, groups, 64*mib)
	if want := float64(64*mib) / (m.NIC.GBps / 2 * 1e3); !near(tm.US[0], want) {
		t.Errorf("oversubscribed by 2: %v µs, want %v", tm.US[0], want)
	}
	m.Fabric.Oversubscription = 1
	one, spine := 0, 3
	m.Faults = []Fault{{Kind: SlowUplink, Leaf: &one, Spine: &spine, Factor: 0.5}}
	n = NewNet(m)
	tm = n.OpTimes(Shift, groups, 64*mib)
	for i, grp := range groups {
		slow := m.SpineOf(grp[0]%g) == spine
		want := float64(64*mib) / (m.NIC.GBps * 1e3)
		if slow {
			want *= 2
		}
		if !near(tm.US[i], want) {
			t.Errorf("group %v (rail %d): %v µs, want %v", grp, grp[0]%g, tm.US[i], want)
		}
	}
}

// TestRingOrTree: an allreduce of many ranks takes the tree's latency,
// of a few the ring's bandwidth.
func TestRingOrTree(t *testing.T) {
	m := Defaults()
	m.Hosts = 512
	n := NewNet(&m)
	all := make([]int, m.Ranks())
	for i := range all {
		all[i] = i
	}
	tm := n.OpTimes(Ring, [][]int{all}, 1<<30)
	k := float64(len(all))
	ring := 2*(k-1)*(2*m.NIC.LatencyUS+3*m.Fabric.LatencyUS) + 0 // its latency alone
	if tm.US[0] >= ring {
		t.Errorf("allreduce of %d ranks: %v µs, no faster than the ring's latency alone (%v)", len(all), tm.US[0], ring)
	}
}

// TestDrawIsSeeded: the same seed and operation give the same time, and
// a flapping NIC is slow about one time in every.
func TestDrawIsSeeded(t *testing.T) {
	m := Defaults()
	if m.Draw(100, 300, 0, 5, 9) != m.Draw(100, 300, 0, 5, 9) {
		t.Error("two draws of one operation differ")
	}
	slow := 0
	for op := uint64(0); op < 4000; op++ {
		if m.Draw(100, 1000, 4, 7, op) > 500 {
			slow++
		}
	}
	if slow < 800 || slow > 1200 {
		t.Errorf("a NIC flapping one time in 4 was slow %d times in 4,000", slow)
	}
}
