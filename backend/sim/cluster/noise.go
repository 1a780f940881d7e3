package cluster

import "math"

// hash mixes its words into 64 well-spread bits (splitmix64 steps).
func hash(words ...uint64) uint64 {
	x := uint64(0x9E3779B97F4A7C15)
	for _, w := range words {
		x ^= w + 0x9E3779B97F4A7C15 + (x << 6) + (x >> 2)
		x ^= x >> 30
		x *= 0xBF58476D1CE4E5B9
		x ^= x >> 27
		x *= 0x94D049BB133111EB
		x ^= x >> 31
	}
	return x
}

// unit is a draw in (0, 1).
func unit(words ...uint64) float64 {
	return (float64(hash(words...)>>11) + 0.5) / (1 << 53)
}

// Draw is the time of one operation: the model's time t (flap when the
// group's flapping NIC is slow this time, which happens one time in
// every), with the noise's spread and stalls. key and op name the
// operation, so the same seed gives the same draws whatever the order in
// which goroutines run.
func (m *Model) Draw(t, flap float64, every int, key, op uint64) float64 {
	seed := m.Noise.Seed
	if every > 0 && unit(seed, key, op, 1) < 1/float64(every) {
		t = flap
	}
	if s := m.Noise.Spread; s > 0 {
		// A normal draw by Box-Muller, as a log-normal factor.
		z := math.Sqrt(-2*math.Log(unit(seed, key, op, 2))) * math.Cos(2*math.Pi*unit(seed, key, op, 3))
		t *= math.Exp(s*z - s*s/2)
	}
	if e := m.Noise.StallEvery; e > 0 && unit(seed, key, op, 4) < 1/float64(e) {
		t *= m.Noise.StallFactor
	}
	return t
}
