package measure

// hyperCubeSpec: log2(n) rounds, each exchanging with rank XOR 2^k, which
// leaves every rank with every input in rank order, as allgather does.
var hyperCubeSpec = collSpec{
	name: "hypercube", aliases: []string{"hyper-cube"},
	outcome:    "log2(n) rounds, each exchanging with rank XOR 2^k",
	powerOfTwo: true,
	shape:      gathered,
	bus:        busParts,
	alg:        busParts, // NCCL's benchmark counts what each rank receives: algbw = busbw
	want:       inOrderWant,
	groupWant:  inOrderGroupWant,
}
