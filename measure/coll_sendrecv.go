package measure

// sendRecvSpec: each rank sends to the next and receives from the one
// before, around the ring.
var sendRecvSpec = collSpec{
	name: "sendrecv", aliases: []string{"send-recv", "send_recv", "p2p"},
	outcome:   "each rank sends to rank+1 and receives from rank-1",
	noInPlace: true,
	shape:     whole,
	bus:       busOne,
	want: func(e Expectation, i int64) float64 {
		n := int64(e.Ranks)
		return e.input(int((int64(e.Rank)-1+n)%n), i)
	},
	groupWant: func(_, _ int64, _, q, k int, _ float64, val func(int) float64) float64 {
		return val((q - 1 + k) % k)
	},
}
