package nccl

import (
	"fmt"
	"sync"

	"collbench/internal/words"
)

// memoryReserve is left free on every GPU for NCCL's own lazy allocations
// and the CUDA context's growth.
const memoryReserve = 512 << 20

// MemoryBudget is the free memory of the tightest local GPU, less a
// reserve for NCCL: what each local rank may still allocate.
func (w *world) MemoryBudget() (int64, string) {
	type free struct {
		bytes int64
		err   error
	}
	got := make([]free, len(w.ranks))
	var wg sync.WaitGroup
	for i, r := range w.ranks {
		wg.Add(1)
		r.wk.tasks <- func() {
			defer wg.Done()
			f, _, err := w.b.drv.MemInfo()
			got[i] = free{f, err}
		}
	}
	wg.Wait()
	best := -1
	for i, g := range got {
		if g.err != nil {
			return -1, "unknown"
		}
		if best < 0 || g.bytes < got[best].bytes {
			best = i
		}
	}
	if best < 0 {
		return -1, "unknown"
	}
	r := w.ranks[best]
	return max(got[best].bytes-memoryReserve, 0), fmt.Sprintf("the %s free on GPU %d (%s) less %s kept for NCCL",
		words.BytesApprox(got[best].bytes), r.dev.index, r.dev.busID, words.BytesApprox(memoryReserve))
}

// LibraryMemory is the device memory the communicators took when they were
// created, the most on any local GPU.
func (w *world) LibraryMemory() int64 {
	var most int64 = -1
	for _, r := range w.ranks {
		if r.freeBefore > 0 && r.freeAfter > 0 {
			most = max(most, r.freeBefore-r.freeAfter)
		}
	}
	return most
}

// UsedMemory is the device memory in use now on the busiest local GPU.
func (w *world) UsedMemory() int64 {
	used := make([]int64, len(w.ranks))
	var wg sync.WaitGroup
	for i, r := range w.ranks {
		wg.Add(1)
		r.wk.tasks <- func() {
			defer wg.Done()
			if free, total, err := w.b.drv.MemInfo(); err == nil {
				used[i] = total - free
			} else {
				used[i] = -1
			}
		}
	}
	wg.Wait()
	most := int64(-1)
	for _, u := range used {
		most = max(most, u)
	}
	return most
}
