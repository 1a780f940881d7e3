package measure

// gatherSpec: the root ends with every rank's input, in rank order.
var gatherSpec = collSpec{
	name: "gather", rooted: true,
	outcome:   "the root ends with all ranks' inputs, in rank order",
	shape:     gathered,
	bus:       busParts,
	want:      inOrderWant,
	groupWant: inOrderGroupWant,
}
