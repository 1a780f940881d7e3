package measure

// broadcastSpec: every rank ends with the root's input.
var broadcastSpec = collSpec{
	name: "broadcast", aliases: []string{"bcast"}, rooted: true,
	outcome:   "every rank ends with the root's input",
	shape:     whole,
	bus:       busOne,
	want:      func(e Expectation, i int64) float64 { return e.input(e.Root, i) },
	groupWant: rootGroupWant,
}
