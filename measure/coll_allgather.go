package measure

// allGatherSpec: every rank ends with every rank's input, in rank order.
var allGatherSpec = collSpec{
	name: "allgather", aliases: []string{"all-gather", "all_gather", "ag"},
	outcome:   "every rank ends with all ranks' inputs, in rank order",
	shape:     gathered,
	bus:       busParts,
	want:      inOrderWant,
	groupWant: inOrderGroupWant,
}
