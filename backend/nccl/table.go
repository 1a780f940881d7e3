package nccl

import (
	"collbench/backend/nccl/driver"
	"collbench/cuda"
	"collbench/measure"
)

// collOp is the NCCL backend's row for one collective: the one NCCL call
// that is it (call, where the loaded library has it: native), and where
// there is none, how it is built from sends and receives: one group on
// every rank (exchange) or a group per round (rounds). ops holds a row for
// every collective measure knows: a collective built from sends and
// receives is its measure file and a row here, a native one adds its
// binding (driver.OpKind) and the fake machine's operation
// (TestEveryCollectiveHasANCCLRow).
type collOp struct {
	call driver.OpKind
	// native, if set, says whether the library has call; without it the
	// collective is its exchange.
	native func(driver.Features) bool
	// ring: the call sends to rank+1 and receives from rank-1 (sendrecv).
	ring bool
	// exchange is the rank's sends and receives of one operation, issued
	// as one group; rounds are one operation's steps, copies and a group
	// per round, issued in order (driver.Comm.GroupSteps).
	exchange func(r *rank, c measure.Call, send, recv cuda.DevPtr, esz int64) []driver.P2P
	rounds   func(r *rank, c measure.Call, send, recv cuda.DevPtr, esz int64) []driver.Step
}

var ops = map[measure.Collective]collOp{
	measure.AllReduce:     {call: driver.AllReduce},
	measure.AllGather:     {call: driver.AllGather},
	measure.ReduceScatter: {call: driver.ReduceScatter},
	measure.Broadcast:     {call: driver.Broadcast},
	measure.Reduce:        {call: driver.Reduce},
	measure.SendRecv:      {call: driver.SendRecv, ring: true},
	measure.AllToAll: {call: driver.AllToAll, native: func(f driver.Features) bool { return useNativeAllToAll(f.AllToAll) },
		exchange: exchangeAllToAll},
	measure.Gather:    {call: driver.Gather, native: func(f driver.Features) bool { return f.Gather }, exchange: exchangeRooted},
	measure.Scatter:   {call: driver.Scatter, native: func(f driver.Features) bool { return f.Gather }, exchange: exchangeRooted},
	measure.AllToAllV: {exchange: exchangeAllToAllV},
	measure.HyperCube: {rounds: (*rank).hypercube},
}

// exchangeAllToAll: a send to and a receive from every rank, a part each.
func exchangeAllToAll(r *rank, c measure.Call, send, recv cuda.DevPtr, esz int64) []driver.P2P {
	dt := int(c.DType)
	ops := r.p2p[:0]
	part := cuda.DevPtr(c.Count * esz) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
	for p := 0; p < r.Size(); p++ {
		ops = append(ops, sendOp(send+cuda.DevPtr(p)*part, c.Count, dt, p), recvOp(recv+cuda.DevPtr(p)*part, c.Count, dt, p)) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
	}
	return ops
}

// exchangeRooted: gather (a send to the root, the root receiving from every
// rank) and scatter (the root sending to every rank, a receive from it).
func exchangeRooted(r *rank, c measure.Call, send, recv cuda.DevPtr, esz int64) []driver.P2P {
	dt := int(c.DType)
	// Older libraries: one send and one receive per peer, in a group.
	part := cuda.DevPtr(c.Count * esz) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
	ops := r.p2p[:0]
	if c.Coll == measure.Gather {
		ops = append(ops, sendOp(send, c.Count, dt, c.Root))
		if r.id == c.Root {
			for p := 0; p < r.Size(); p++ {
				ops = append(ops, recvOp(recv+cuda.DevPtr(p)*part, c.Count, dt, p)) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
			}
		}
		return ops
	}
	if r.id == c.Root {
		for p := 0; p < r.Size(); p++ {
			ops = append(ops, sendOp(send+cuda.DevPtr(p)*part, c.Count, dt, p)) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		}
	}
	return append(ops, recvOp(recv, c.Count, dt, c.Root))
}

// exchangeAllToAllV: alltoall with uneven parts (measure.VCount).
func exchangeAllToAllV(r *rank, c measure.Call, send, recv cuda.DevPtr, esz int64) []driver.P2P {
	dt := int(c.DType)
	n := r.Size()
	ops := r.p2p[:0]
	for p := 0; p < n; p++ {
		out := cuda.DevPtr(measure.VDispl(c.Count, int(esz), r.id, p, n) * esz)    //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		in := cuda.DevPtr(measure.VRecvDispl(c.Count, int(esz), p, r.id, n) * esz) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		// Empty parts (to itself) are not issued, as NCCL's benchmark
		// does not issue them.
		if k := measure.VCount(c.Count, int(esz), r.id, p, n); k > 0 {
			ops = append(ops, sendOp(send+out, k, dt, p))
		}
		if k := measure.VCount(c.Count, int(esz), p, r.id, n); k > 0 {
			ops = append(ops, recvOp(recv+in, k, dt, p))
		}
	}
	return ops
}
