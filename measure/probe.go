package measure

import (
	"context"
	"fmt"

	"collbench/internal/words"
	"collbench/watchdog"
)

// ProbeRows issues every row of a sweep once on every rank, untimed and
// unverified, in the order the runner measures them (case by case, size by
// size), out-of-place where the plan measures it and in place otherwise. A
// library that logs its decisions per call then logs one per row, in row
// order, on each group's communicator. It returns how many rows it issued
// (rows past a failure are not issued) and the error that stopped it.
// onRow, if set, is called before each row with its index.
func ProbeRows(ctx context.Context, w World, p Plan, cases []Case, layout Layout, board *watchdog.Board, onRow func(int)) (int, error) {
	n := w.Size()
	if len(layout.Groups) == 0 {
		layout = WholeWorld(n)
	}
	gw := w
	if len(layout.Groups) > 1 {
		sw, err := w.Split(layout)
		if err != nil {
			return 0, err
		}
		defer sw.Close()
		gw = sw
	}
	local := gw.Ranks()
	index := map[int]int{}
	for i, r := range local {
		index[r.WorldRank()] = i
	}
	var maxBytes int64
	for _, c := range cases {
		for _, s := range p.Sizes {
			for _, g := range layout.Groups {
				maxBytes = max(maxBytes, GeometryFor(c.Coll, s, c.DType.Size(), len(g), 0).Bytes)
			}
		}
	}
	pad := int64(8 * p.Misalign)
	bufs := &buffers{world: gw, index: index, limit: max(maxBytes+pad, 8), register: p.Register,
		send: make([]Buffer, len(local)), recv: make([]Buffer, len(local))}
	defer bufs.release()
	issued := 0
	for _, c := range cases {
		esz := c.DType.Size()
		inPlace := !p.OutOfPlace && c.Coll.InPlaceDefined()
		for _, size := range p.Sizes {
			if err := ctx.Err(); err != nil {
				return issued, err
			}
			var need int64
			for _, g := range layout.Groups {
				need = max(need, GeometryFor(c.Coll, size, esz, len(g), 0).Bytes)
			}
			if err := bufs.ensure(need + pad); err != nil {
				return issued, fmt.Errorf("%s size %s: %w", c.Coll, words.SizeArg(size), err)
			}
			if onRow != nil {
				onRow(issued)
			}
			what := "probe of " + describeCase(c, size, inPlace)
			err := gw.Run(func(r Rank) error {
				i := index[r.WorldRank()]
				g := GeometryFor(c.Coll, size, esz, r.Size(), r.Rank())
				base := int64(p.Misalign * esz)
				call := Call{Coll: c.Coll, DType: c.DType, Op: c.Op, Root: c.Root, Count: g.Count,
					Send: View{bufs.send[i], base}, Recv: View{bufs.recv[i], base}}
				if inPlace {
					call.Send = View{bufs.recv[i], base}.At(g.SendInPlace, esz)
					call.Recv = View{bufs.recv[i], base}.At(g.RecvInPlace, esz)
				}
				tr := board.For(r.WorldRank())
				tr.Begin(what, watchdog.Timed, 1)
				defer tr.SetPhase(watchdog.Idle)
				tr.Op(1)
				if err := r.Launch(call); err != nil {
					return err
				}
				return r.Sync()
			})
			if err != nil {
				return issued, fmt.Errorf("%s: %w", what, err)
			}
			issued++
		}
	}
	return issued, nil
}
