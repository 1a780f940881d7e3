package measure

// collSpec describes one collective once, in a file of its own
// (coll_<name>.go): its names, what it takes, how a row's size becomes its
// buffers, its bus bandwidth factor, and the value each output element must
// hold, in a sweep and in verify-groups. Each backend's way of running it
// lives with the backend.
type collSpec struct {
	name    string
	aliases []string
	reduces bool // takes a reduction operation
	rooted  bool // takes a root rank
	outcome string
	// noInPlace: measured out-of-place only (a point-to-point exchange
	// whose in-place use would overwrite data before peers read it).
	noInPlace bool
	// powerOfTwo: runs only on a power-of-two number of ranks.
	powerOfTwo bool
	// noPeak: its busbw cannot be held against a link's peak.
	noPeak bool
	shape  shape
	// bus is busbw over a row's bytes per second (Geometry.Bytes) on n
	// ranks; alg, where set, is algbw's (1 where nil): the share of the
	// bytes NCCL's benchmark counts as moved.
	bus func(n float64) float64
	alg func(n float64) float64
	// want is the value output element i must hold (a sweep's pattern).
	want func(e Expectation, i int64) float64
	// groupWant is the value element i of rank q of k must hold in
	// verify-groups, where rank j's input is val(j) everywhere, sum is
	// their sum and count is the call's count.
	groupWant func(i, count int64, esz, q, k int, sum float64, val func(int) float64) float64
}

// shape is how a row's size becomes one rank's buffers.
type shape int

const (
	// whole: every rank sends and receives the whole count.
	whole shape = iota
	// gathered: each rank sends its part of count; it receives all n.
	gathered
	// scattered: each rank sends all n parts; it receives its own.
	scattered
	// exchanged: each rank sends and receives n parts of count/n each.
	exchanged
)

// Bus factors.
func busOne(float64) float64     { return 1 }
func busParts(n float64) float64 { return (n - 1) / n }
func busTwice(n float64) float64 { return 2 * (n - 1) / n }
func inOrderWant(e Expectation, i int64) float64 {
	c := max(e.Geom.SendCount, 1)
	return e.input(int(i/c), i%c)
}
func inOrderGroupWant(i, count int64, _, _, _ int, _ float64, val func(int) float64) float64 {
	return val(int(i / count))
}
func sumGroupWant(_, _ int64, _, _, _ int, sum float64, _ func(int) float64) float64 { return sum }
func rootGroupWant(_, _ int64, _, _, _ int, _ float64, val func(int) float64) float64 {
	return val(0)
}

// specs are the collectives' descriptions, in the order of the constants.
var specs = [numCollectives]*collSpec{
	AllReduce: &allReduceSpec, AllGather: &allGatherSpec, ReduceScatter: &reduceScatterSpec,
	Broadcast: &broadcastSpec, Reduce: &reduceSpec, AllToAll: &allToAllSpec, SendRecv: &sendRecvSpec,
	Gather: &gatherSpec, Scatter: &scatterSpec, AllToAllV: &allToAllVSpec, HyperCube: &hyperCubeSpec,
}
