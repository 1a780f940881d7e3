package measure

import (
	"fmt"
	"math"
	"testing"
)

func TestParseCollectiveAliases(t *testing.T) {
	cases := map[string]Collective{
		"allreduce": AllReduce, "all-reduce": AllReduce, "all_reduce": AllReduce, "ALLREDUCE": AllReduce,
		"allgather": AllGather, "all_gather": AllGather, "reduce-scatter": ReduceScatter,
		"reducescatter": ReduceScatter, "reduce_scatter": ReduceScatter, "broadcast": Broadcast,
		"bcast": Broadcast, "reduce": Reduce, "alltoall": AllToAll, "all-to-all": AllToAll,
		"sendrecv": SendRecv, "send_recv": SendRecv,
	}
	for in, want := range cases {
		if got, err := ParseCollective(in); err != nil || got != want {
			t.Errorf("ParseCollective(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseCollective("allscatter"); err == nil {
		t.Error("unknown collective accepted")
	}
	all, err := ParseCollectives("all")
	if err != nil || len(all) != 11 {
		t.Errorf("ParseCollectives(all) = %v, %v", all, err)
	}
	two, err := ParseCollectives("allreduce, ar ,allgather")
	if err != nil || len(two) != 2 {
		t.Errorf("duplicates not merged: %v, %v", two, err)
	}
}

func TestBusFactor(t *testing.T) {
	cases := []struct {
		c    Collective
		n    int
		want float64
	}{
		{AllReduce, 1, 0}, {AllReduce, 2, 1}, {AllReduce, 4, 1.5}, {AllReduce, 8, 1.75},
		{AllGather, 4, 0.75}, {ReduceScatter, 8, 0.875}, {AllToAll, 2, 0.5},
		{Broadcast, 4, 1}, {Reduce, 8, 1}, {SendRecv, 4, 1},
		{Gather, 4, 0.75}, {Scatter, 2, 0.5}, {AllToAllV, 8, 0.875}, {HyperCube, 4, 0.75},
	}
	for _, c := range cases {
		if got := c.c.BusFactor(c.n); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%v.BusFactor(%d) = %v, want %v", c.c, c.n, got, c.want)
		}
	}
}

// TestGeometryEveryCollective checks byte accounting for every collective and
// rank counts 1 to 9, against the rules of NCCL's benchmark.
func TestGeometryEveryCollective(t *testing.T) {
	sizes := []int64{8, 100, 1 << 20, 1<<20 + 4, 3 << 30}
	for _, c := range AllCollectives() {
		for n := 1; n <= 9; n++ {
			for _, esz := range []int{1, 2, 4, 8} {
				for _, size := range sizes {
					t.Run(fmt.Sprintf("%v/n%d/e%d/%d", c, n, esz, size), func(t *testing.T) {
						count := size / int64(esz)
						for rank := 0; rank < n; rank++ {
							g := GeometryFor(c, size, esz, n, rank)
							checkGeometry(t, c, g, count, int64(n), int64(rank), int64(esz))
						}
					})
				}
			}
		}
	}
}

func checkGeometry(t *testing.T, c Collective, g Geometry, count, n, rank, esz int64) {
	t.Helper()
	var send, recv, param, sOff, rOff int64
	switch c {
	case AllGather, Gather, HyperCube:
		param = count / n
		send, recv, sOff = param, param*n, rank*param
	case ReduceScatter, Scatter:
		param = count / n
		send, recv, rOff = param*n, param, rank*param
	case AllToAll:
		param = count / n
		send, recv = param*n, param*n
	case AllToAllV:
		// alltoallv_perf: the per-peer count rounded down to 16 bytes,
		// each part (d/(1+…+n-1) of the whole) rounded down to 16 bytes.
		param = count / n &^ (16/esz - 1)
		total := param * n * esz
		var bytes int64
		if n == 1 {
			bytes = total &^ 15
		}
		for d := int64(1); d < n; d++ {
			bytes += d * total / (n * (n - 1) / 2) &^ 15
		}
		send, recv = bytes/esz, bytes/esz
	default:
		param, send, recv = count, count, count
	}
	want := Geometry{Bytes: max(send, recv) * esz, Count: param, SendCount: send, RecvCount: recv, SendInPlace: sOff, RecvInPlace: rOff}
	if g != want {
		t.Fatalf("got %+v, want %+v", g, want)
	}
	if g.Bytes > count*esz {
		t.Fatalf("row size %d exceeds the requested %d", g.Bytes, count*esz)
	}
	// The in-place areas must lie inside the one in-place buffer.
	if g.SendInPlace+g.SendCount > g.BufferElems() || g.RecvInPlace+g.RecvCount > g.BufferElems() {
		t.Fatalf("in-place areas overrun the buffer: %+v", g)
	}
}

func TestParseOpAndAverage(t *testing.T) {
	for i, name := range []string{"sum", "prod", "max", "min", "avg"} {
		op, err := ParseOp(name)
		if err != nil || int(op) != i || op.String() != name {
			t.Errorf("ParseOp(%q) = %v, %v", name, op, err)
		}
	}
	if _, err := ParseOp("xor"); err == nil {
		t.Error("xor accepted")
	}
	if NoOp.String() != "none" {
		t.Error("NoOp should print as none")
	}
	times := []float64{4, 1, 7}
	for s, want := range map[string]float64{"mean": 4, "min": 1, "max": 7, "rank0": 4} {
		a, err := ParseAverage(s)
		if err != nil || a.Combine(times) != want {
			t.Errorf("average %s = %v, %v", s, a.Combine(times), err)
		}
	}
	if _, err := ParseAverage("median"); err == nil {
		t.Error("median accepted")
	}
}

// TestAllToAllVParts checks the alltoallv pattern: every part differs per
// peer and is a whole number of 16 bytes, each rank sends and receives
// about n×count, and the send and receive displacements tile the buffers
// without overlap.
func TestAllToAllVParts(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7, 8} {
		const count, esz = 1000, 4
		for r := 0; r < n; r++ {
			var sent, recvd int64
			seen := map[int64]bool{}
			for p := 0; p < n; p++ {
				c := VCount(count, esz, r, p, n)
				if c*esz%16 != 0 || VDispl(count, esz, r, p, n)*esz%16 != 0 {
					t.Fatalf("n=%d rank %d part %d: %d elements at %d, not whole 16 bytes", n, r, p, c, VDispl(count, esz, r, p, n))
				}
				if seen[c] {
					t.Fatalf("n=%d rank %d: two peers get %d elements", n, r, c)
				}
				seen[c] = true
				if VDispl(count, esz, r, p, n) != sent {
					t.Fatalf("n=%d: send displacement of part %d is %d, want %d", n, p, VDispl(count, esz, r, p, n), sent)
				}
				if VRecvDispl(count, esz, p, r, n) != recvd {
					t.Fatalf("n=%d: receive displacement of part %d is %d, want %d", n, p, VRecvDispl(count, esz, p, r, n), recvd)
				}
				sent += c
				recvd += VCount(count, esz, p, r, n)
			}
			if g := GeometryFor(AllToAllV, count*esz*int64(n), esz, n, r); g.SendCount != sent || g.RecvCount != recvd {
				t.Fatalf("n=%d rank %d: geometry sends %d and receives %d, the parts %d and %d", n, r, g.SendCount, g.RecvCount, sent, recvd)
			}
			if sent > count*int64(n) || sent < count*int64(n)-int64(n)*VAlign(esz) || recvd > count*int64(n) {
				t.Fatalf("n=%d rank %d sends %d and receives %d, want about %d", n, r, sent, recvd, count*n)
			}
		}
	}
}
