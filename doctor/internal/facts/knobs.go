package facts

// Knobs are what a user sets of a doctor run: the mode, the message sizes
// and the iterations. Doctor's Options, the engine's Doctor and its
// Simulation all carry them; DefaultKnobs gives each class of backend its
// defaults, and Or fills what a user left out.
type Knobs struct {
	// Quick runs the health facts, every GPU pair of each host, and one
	// round of each other stage: node admission.
	Quick bool
	// BWSize and LatSize are the message sizes of the pair and host tests;
	// CopySize that of each GPU alone and WorldSize of the whole world.
	BWSize, LatSize, CopySize, WorldSize int64
	// Iters are the timed iterations of each test (the best one counts),
	// Warmup the untimed ones before them.
	Iters, Warmup int
}

// DefaultKnobs are the defaults for a backend on GPUs (a real or modelled
// one) or, with hostMemory, on host memory (the cpu and mpi backends),
// whose ranks share a host's cores and memory: smaller sizes, more
// iterations.
func DefaultKnobs(hostMemory bool) Knobs {
	if hostMemory {
		return Knobs{BWSize: 1 << 20, LatSize: 4 << 10, CopySize: 4 << 20, WorldSize: 4 << 20, Iters: 15, Warmup: 1}
	}
	return Knobs{BWSize: 256 << 20, LatSize: 4 << 10, CopySize: 256 << 20, WorldSize: 1 << 30, Iters: 10, Warmup: 2}
}

// Or returns k with every size and count it leaves at 0 taken from d (the
// mode is k's).
func (k Knobs) Or(d Knobs) Knobs {
	pick := func(a, b int64) int64 {
		if a > 0 {
			return a
		}
		return b
	}
	k.BWSize, k.LatSize = pick(k.BWSize, d.BWSize), pick(k.LatSize, d.LatSize)
	k.CopySize, k.WorldSize = pick(k.CopySize, d.CopySize), pick(k.WorldSize, d.WorldSize)
	k.Iters, k.Warmup = int(pick(int64(k.Iters), int64(d.Iters))), int(pick(int64(k.Warmup), int64(d.Warmup)))
	return k
}
