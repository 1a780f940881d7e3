package results

// Bitwise is what --bitwise N found in one half of a row: the call run N
// times in a row on the same random inputs, every rank's output compared
// bit for bit with its own first run's and, where the collective leaves
// every rank of a group the same result (allreduce), with the other ranks'.
type Bitwise struct {
	Runs int `json:"runs"`
	// Seed drew the inputs (the run's --seed mixed with the row's place),
	// so a divergence replays.
	Seed uint64 `json:"seed"`
	// Same is true when every run on every rank gave the same bits.
	Same bool `json:"same"`
	// First is the first divergence found (the lowest rank's); nil when
	// Same.
	First *BitDivergence `json:"first,omitempty"`
}

// BitDivergence is where two outputs that should be equal first differ.
type BitDivergence struct {
	// Check is "run" (a run's output differs from the rank's first run's)
	// or "ranks" (a rank's output differs from its group's first rank's).
	Check string `json:"check"`
	// Run is the run, from 1, that differs from run 1 (check "run").
	Run int `json:"run,omitempty"`
	// Rank is the world rank whose output differs; Other the rank it was
	// compared with (check "ranks").
	Rank  int `json:"rank"`
	Other int `json:"other_rank,omitempty"`
	// Element is the first differing element's index in the output, and
	// XOR the two elements' bits XORed, in hexadecimal; -1 and "" where
	// only the outputs' digests were compared (ranks of other processes,
	// or outputs over 64 MiB).
	Element int64  `json:"element"`
	XOR     string `json:"xor,omitempty"`
}

// bitsDiffer counts the halves whose bits differed.
func bitsDiffer(r Row) int {
	n := 0
	for _, h := range r.Halves() {
		if h.Bitwise != nil && !h.Bitwise.Same {
			n++
		}
	}
	return n
}
