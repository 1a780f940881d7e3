package fakegpu

import (
	"sort"

	"collbench/cuda"
)

// memory is every GPU's device memory: allocations in host memory at
// addresses that say which GPU they are on (GPU i's start at (i+1)<<40).
type memory struct {
	next  []cuda.DevPtr
	used  []int64
	alloc []*allocation // sorted by base
}

type allocation struct {
	base  cuda.DevPtr
	buf   []byte
	dev   int
	nccl  bool // from ncclMemAlloc
	regs  int  // registrations outstanding
	freed bool
}

func (m *memory) init(gpus int) {
	m.next = make([]cuda.DevPtr, gpus)
	m.used = make([]int64, gpus)
	for i := range m.next {
		m.next[i] = cuda.DevPtr(i+1) << 40 //nolint:gosec // G115: a GPU index
	}
}

// add allocates bytes on dev (the caller checked the memory left).
func (m *memory) add(dev int, bytes int64, nccl bool) *allocation {
	a := &allocation{base: m.next[dev], buf: make([]byte, bytes), dev: dev, nccl: nccl}
	m.next[dev] += cuda.DevPtr((bytes + 511) &^ 511) //nolint:gosec // G115: a size checked against the GPU's memory
	m.used[dev] += bytes
	m.alloc = append(m.alloc, a)
	sort.Slice(m.alloc, func(i, j int) bool { return m.alloc[i].base < m.alloc[j].base })
	return a
}

// find is the live allocation that holds p, or nil.
func (m *memory) find(p cuda.DevPtr) *allocation {
	i := sort.Search(len(m.alloc), func(i int) bool { return m.alloc[i].base > p }) - 1
	if i < 0 {
		return nil
	}
	a := m.alloc[i]
	if p >= a.base+cuda.DevPtr(len(a.buf)) {
		return nil
	}
	return a
}

func (m *memory) remove(a *allocation) {
	for i, x := range m.alloc {
		if x == a {
			m.alloc = append(m.alloc[:i], m.alloc[i+1:]...)
			break
		}
	}
	m.used[a.dev] -= int64(len(a.buf))
	a.freed = true
}

// slice is bytes of device memory at p, which must lie in one allocation;
// ok is false when it does not (an illegal address on a GPU).
func (d *Driver) slice(p cuda.DevPtr, bytes int64) (buf []byte, dev int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.mem.find(p)
	if a == nil || bytes < 0 {
		return nil, -1, false
	}
	off := int64(p - a.base) //nolint:gosec // G115: an offset inside an allocation
	if off+bytes > int64(len(a.buf)) {
		return nil, a.dev, false
	}
	return a.buf[off : off+bytes], a.dev, true
}
