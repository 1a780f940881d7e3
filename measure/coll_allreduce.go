package measure

// allReduceSpec: every rank ends with the reduction of every rank's input.
var allReduceSpec = collSpec{
	name: "allreduce", aliases: []string{"all-reduce", "all_reduce", "ar"}, reduces: true,
	outcome:   "every rank ends with the reduction of all inputs",
	shape:     whole,
	bus:       busTwice,
	want:      func(e Expectation, i int64) float64 { return e.reduceAt(i) },
	groupWant: sumGroupWant,
}
