package measure

// reduceSpec: the root ends with the reduction of every rank's input.
var reduceSpec = collSpec{
	name: "reduce", reduces: true, rooted: true,
	outcome:   "the root ends with the reduction of all inputs",
	shape:     whole,
	bus:       busOne,
	want:      func(e Expectation, i int64) float64 { return e.reduceAt(i) },
	groupWant: sumGroupWant,
}
