package measure

// scatterSpec: rank r ends with part r of the root's input.
var scatterSpec = collSpec{
	name: "scatter", rooted: true,
	outcome: "rank r ends with part r of the root's input",
	shape:   scattered,
	bus:     busParts,
	want: func(e Expectation, i int64) float64 {
		return e.input(e.Root, int64(e.Rank)*e.Geom.RecvCount+i)
	},
	groupWant: rootGroupWant,
}
