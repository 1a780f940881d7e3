package measure

// reduceScatterSpec: rank r ends with part r of the reduction.
var reduceScatterSpec = collSpec{
	name: "reduce-scatter", aliases: []string{"reducescatter", "reduce_scatter", "rs"}, reduces: true,
	outcome: "rank r ends with part r of the reduction",
	shape:   scattered,
	bus:     busParts,
	want: func(e Expectation, i int64) float64 {
		return e.reduceAt(int64(e.Rank)*e.Geom.RecvCount + i)
	},
	groupWant: sumGroupWant,
}
