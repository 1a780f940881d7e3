package measure

import (
	"encoding/json"
	"fmt"

	"collbench/internal/words"
)

// minAlloc is the smallest buffer allocated, so small sizes share one buffer.
const minAlloc = 1 << 20

// allocFor is what ensure allocates per buffer when a size needs need
// bytes and the largest size needs limit.
func allocFor(need, limit int64) int64 { return max(min(max(need, minAlloc), limit), need) }

// checkMemory refuses, before anything is allocated, every size whose two
// buffers per rank do not fit in what each local rank may allocate; all
// processes of a distributed world agree on the answer.
func (rn *Runner) checkMemory() error {
	var verdict *SizesTooLargeError
	if mb, ok := rn.w.(MemoryBudgeter); ok {
		budget, what := mb.MemoryBudget()
		if budget >= 0 {
			var limit int64
			need := map[int64]int64{}
			for _, size := range rn.Plan.Sizes {
				for _, c := range rn.Cases {
					for _, g := range rn.layout.Groups {
						need[size] = max(need[size], GeometryFor(c.Coll, size, c.DType.Size(), len(g), 0).Bytes)
					}
				}
				limit = max(limit, need[size])
			}
			limit = max(limit, 8)
			var fits int64 // the largest size that fits, were it the largest of the sweep
			for _, size := range rn.Plan.Sizes {
				if 2*allocFor(need[size], need[size]) <= budget {
					fits = max(fits, size)
				}
				if n := 2 * allocFor(need[size], limit); n > budget {
					if verdict == nil {
						verdict = &SizesTooLargeError{Budget: budget, What: what, Rank: rn.w.Ranks()[0].WorldRank()}
					}
					verdict.Sizes = append(verdict.Sizes, size)
					verdict.Need = append(verdict.Need, n)
				}
			}
			if verdict != nil {
				verdict.Largest = fits
			}
		}
	}
	d, ok := rn.w.(Distributed)
	if !ok || d.Control() == nil {
		if verdict != nil {
			return verdict
		}
		return nil
	}
	mine, _ := json.Marshal(verdict)
	parts, err := d.Control().AllGather(mine)
	if err != nil {
		return fmt.Errorf("agreeing on memory: %w", err)
	}
	for _, p := range parts {
		var v *SizesTooLargeError
		if json.Unmarshal(p, &v) == nil && v != nil {
			return v
		}
	}
	return nil
}

// buffers holds each local rank's send and receive buffer, grown as the
// sweep reaches larger sizes, so running out of memory stops only the sizes
// that do not fit.
type buffers struct {
	world      World
	index      map[int]int // world rank -> position
	limit      int64       // the largest size any case needs
	room       int64       // what to allocate from the start where it fits (0: no more than needed)
	have       int64
	register   int // Plan.Register
	send, recv []Buffer
}

// ensure makes each rank's buffers hold need bytes at least: b.room
// where that is more and the memory allows, else allocFor.
func (b *buffers) ensure(need int64) error {
	if need <= b.have && b.have > 0 {
		return nil
	}
	size := allocFor(need, b.limit)
	if room := min(b.room, b.limit); room > size {
		if b.alloc(room) == nil {
			return nil
		}
	}
	return b.alloc(size)
}

// alloc replaces every rank's buffers with buffers of size bytes.
func (b *buffers) alloc(size int64) error {
	b.release()
	err := b.world.Run(func(r Rank) error {
		i := b.index[r.WorldRank()]
		alloc := r.Alloc
		if b.register > 0 {
			rr, ok := r.(Registrar)
			if !ok {
				return fmt.Errorf("%w: this backend registers no buffers", ErrUnsupported)
			}
			alloc = func(n int64) (Buffer, error) { return rr.AllocRegistered(n, b.register == 2) }
		}
		var err error
		if b.send[i], err = alloc(size); err != nil {
			return fmt.Errorf("allocating the send buffer (%s): %w", words.BytesApprox(size), err)
		}
		if b.recv[i], err = alloc(size); err != nil {
			return fmt.Errorf("allocating the receive buffer (%s): %w", words.BytesApprox(size), err)
		}
		return nil
	})
	if err != nil {
		b.release()
		return err
	}
	b.have = size
	return nil
}

func (b *buffers) release() {
	_ = b.world.Run(func(r Rank) error {
		i := b.index[r.WorldRank()]
		for _, p := range []*Buffer{&b.send[i], &b.recv[i]} {
			if *p != nil {
				_ = r.Free(*p)
				*p = nil
			}
		}
		return nil
	})
	b.have = 0
}
