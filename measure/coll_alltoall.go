package measure

// allToAllSpec: rank r sends its part p to rank p.
var allToAllSpec = collSpec{
	name: "alltoall", aliases: []string{"all-to-all", "all_to_all", "a2a"},
	outcome:   "rank r sends its part p to rank p",
	noInPlace: true,
	shape:     exchanged,
	bus:       busParts,
	want: func(e Expectation, i int64) float64 {
		c := max(e.Geom.Count, 1)
		return e.input(int(i/c), int64(e.Rank)*c+i%c)
	},
	groupWant: inOrderGroupWant,
}
