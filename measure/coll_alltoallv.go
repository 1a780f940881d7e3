package measure

// allToAllVSpec: alltoall with uneven counts between every pair of ranks
// (VCount); its busbw is not held against a link's peak, since the
// busiest rank sets its time while the links idle.
var allToAllVSpec = collSpec{
	name: "alltoallv", aliases: []string{"all-to-all-v", "all_to_all_v", "a2av"},
	outcome:   "alltoall with uneven counts between every pair of ranks",
	noInPlace: true,
	noPeak:    true,
	shape:     exchanged,
	bus:       busParts,
	want: func(e Expectation, i int64) float64 {
		// The sender whose part holds element i.
		k, esz := e.Ranks, e.DType.Size()
		var off int64
		for p := 0; p < k; p++ {
			c := VCount(e.Geom.Count, esz, p, e.Rank, k)
			if i < off+c {
				return e.input(p, VDispl(e.Geom.Count, esz, p, e.Rank, k)+i-off)
			}
			off += c
		}
		return 0
	},
	groupWant: func(i, count int64, esz, q, k int, _ float64, val func(int) float64) float64 {
		for p := 0; p < k; p++ {
			if at := VRecvDispl(count, esz, p, q, k); i >= at && i < at+VCount(count, esz, p, q, k) {
				return val(p)
			}
		}
		return 0
	},
}
