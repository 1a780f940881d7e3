package tune

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"
)

// space is a modelled collective whose best choice is known: tree/ll is
// 30% faster than NCCL's own below 64 KiB, ring/simple 12% faster from
// 1 MiB, NCCL's own best in between; nvls is refused everywhere; every
// time carries noise of sd.
type space struct {
	rng   *rand.Rand
	sd    float64
	calls int
}

func (s *space) measure(_ context.Context, c Choice, size int64, repeats int) ([]float64, error) {
	if c.Algorithm == "nvls" {
		return nil, ErrRefused
	}
	base := 10 + float64(size)/100e3 // µs: a latency and a rate
	f := 1.0
	switch {
	case c.Default:
	case c.Algorithm == "tree" && c.Protocol == "ll" && size < 64<<10:
		f = 1 / 1.3
	case c.Algorithm == "ring" && c.Protocol == "simple" && size >= 1<<20:
		f = 1 / 1.12
	default:
		f = 1.25
	}
	var ts []float64
	for range repeats {
		s.calls++
		ts = append(ts, base*f*(1+s.sd*s.rng.NormFloat64()))
	}
	return ts, nil
}

// newRand is the model's seeded noise.
func newRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) } //nolint:gosec // G404: a seeded model, not security

var cands = []Choice{{Algorithm: "tree", Protocol: "ll", Channels: -1}, {Algorithm: "ring", Protocol: "simple", Channels: -1},
	{Algorithm: "ring", Protocol: "ll128", Channels: -1}, {Algorithm: "nvls", Protocol: "simple", Channels: -1}}

// TestSearchFindsTheKnownBest: on the modelled space, the search names
// tree/ll at small sizes and ring/simple at large ones with gains beyond
// the noise, and NCCL's own where it is best; refused choices are
// skipped; every size is reported coarse, then refined.
func TestSearchFindsTheKnownBest(t *testing.T) {
	s := &space{rng: newRand(1), sd: 0.005}
	sizes := []int64{8 << 10, 256 << 10, 4 << 20}
	reported := map[int64]int{}
	rs, err := Search(context.Background(), s.measure, sizes, cands, time.Minute, 5, func(r Result) { reported[r.Size]++ })
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{8 << 10: "tree/ll", 256 << 10: "default", 4 << 20: "ring/simple"}
	for _, r := range rs {
		if got := r.Best.Choice.String(); got != want[r.Size] || !r.Complete || !r.Refined {
			t.Errorf("%d B: best %s (complete %v, refined %v), want %s", r.Size, got, r.Complete, r.Refined, want[r.Size])
		}
		if (r.Gain > 0) != (want[r.Size] != "default") {
			t.Errorf("%d B: gain %.3f", r.Size, r.Gain)
		}
		for _, c := range r.Cells {
			if c.Choice.Algorithm == "nvls" {
				t.Errorf("%d B: a refused choice was kept", r.Size)
			}
		}
		want := 2
		if r.Gain > 0 {
			want = 3
			if !r.Confirmed || len(r.Pairs) < MinPairs {
				t.Errorf("%d B: a gain not confirmed in pairs (%d pairs)", r.Size, len(r.Pairs))
			}
		}
		if reported[r.Size] != want {
			t.Errorf("%d B reported %d times, want coarse, refined (and confirmed where a gain)", r.Size, reported[r.Size])
		}
	}
	if g := rs[0].Gain; g < 0.25 || g > 0.35 {
		t.Errorf("small-size gain %.3f, want about 0.3", g)
	}
}

// banded is a collective whose every choice runs alike, on a host that
// moves between two latency bands 25% apart every few operations (as the
// shared GPU hosts do for small messages): any gain is the bands'.
type banded struct{ calls int }

func (b *banded) measure(_ context.Context, c Choice, size int64, repeats int) ([]float64, error) {
	var ts []float64
	for range repeats {
		b.calls++
		t := 10.0
		if (b.calls/7)%2 == 1 {
			t = 12.5
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// TestSearchClaimsNoGainFromLatencyBands: medians taken apart can land in
// different bands and look like a gain; the pairs, measured one right
// after the other, do not confirm it, so no size claims one.
func TestSearchClaimsNoGainFromLatencyBands(t *testing.T) {
	b := &banded{}
	rs, err := Search(context.Background(), b.measure, []int64{8, 64, 512, 4096, 32768}, cands[:3], time.Minute, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	paired := 0
	for _, r := range rs {
		if r.Gain > 0 {
			t.Errorf("%d B: a gain of %.2f for %s from the bands alone", r.Size, r.Gain, r.Best.Choice)
		}
		if len(r.Pairs) > 0 {
			paired++
		}
	}
	if paired == 0 {
		t.Error("no size looked like a gain before its pairs: the model does not plant the bands' trap")
	}
}

// TestPairedBeats: a gain stands only where every pair but one shows it,
// over at least MinPairs pairs.
func TestPairedBeats(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pairs [][2]float64
		want  bool
	}{
		{"10% in every pair, across two bands", [][2]float64{{11, 10}, {13.2, 12}, {11, 10}, {13.2, 12}, {11, 10}}, true},
		{"one pair against", [][2]float64{{11, 10}, {10, 10.5}, {11, 10}, {11, 10}, {11, 10}}, true},
		{"two pairs against", [][2]float64{{11, 10}, {10, 10.5}, {10, 10.5}, {11, 10}, {11, 10}}, false},
		{"a band apart, alike within each pair", [][2]float64{{12.5, 12.5}, {10, 10}, {12.5, 12.4}, {10, 10.1}, {12.5, 12.5}}, false},
		{"too few pairs", [][2]float64{{11, 10}, {11, 10}, {11, 10}}, false},
		{"1% apart", [][2]float64{{10.1, 10}, {10.1, 10}, {10.1, 10}, {10.1, 10}, {10.1, 10}}, false},
	} {
		if got, _ := PairedBeats(tc.pairs); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBeatsOnlyBeyondNoise: a 5% difference is a gain between quiet cells
// and not between cells that spread 4% each; nothing beats itself.
func TestBeatsOnlyBeyondNoise(t *testing.T) {
	quietA, quietB := Cell{TimesUS: []float64{100, 100.5, 99.5}}, Cell{TimesUS: []float64{105, 105.4, 104.6}}
	if ok, g := Beats(quietA, quietB); !ok || g < 0.04 {
		t.Errorf("quiet: %v %.3f", ok, g)
	}
	noisyA, noisyB := Cell{TimesUS: []float64{96, 100, 104}}, Cell{TimesUS: []float64{101, 105, 109}}
	if ok, _ := Beats(noisyA, noisyB); ok {
		t.Error("a 5% difference between cells spreading 4% each called a gain")
	}
	if ok, _ := Beats(quietA, quietA); ok {
		t.Error("a cell beats itself")
	}
	// One repeat carries the noise floor: 1% apart is not a gain.
	if ok, _ := Beats(Cell{TimesUS: []float64{100}}, Cell{TimesUS: []float64{101}}); ok {
		t.Error("1% apart on single repeats called a gain")
	}
}

// TestSearchBudget: a budget of zero is refused; a budget that runs out,
// or a cancelled context, returns what was measured, marked incomplete,
// without measuring on.
func TestSearchBudget(t *testing.T) {
	if _, err := Search(context.Background(), (&space{rng: newRand(1)}).measure, []int64{8}, cands, 0, 3, nil); err == nil {
		t.Error("a zero budget was accepted")
	}
	slow := &space{rng: newRand(2)}
	m := func(ctx context.Context, c Choice, size int64, n int) ([]float64, error) {
		time.Sleep(20 * time.Millisecond)
		return slow.measure(ctx, c, size, n)
	}
	rs, err := Search(context.Background(), m, []int64{8, 16, 32, 64}, cands, 50*time.Millisecond, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || rs[0].Complete && rs[3].Complete {
		t.Errorf("a 50 ms budget over 20 measurements of 20 ms: %d sizes, complete %v ... %v", len(rs), rs[0].Complete, rs[len(rs)-1].Complete)
	}
	if slow.calls > 5 {
		t.Errorf("%d measurements after a 50 ms budget of 20 ms each", slow.calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	stop := func(ctx context.Context, c Choice, size int64, n int) ([]float64, error) {
		calls++
		if calls == 3 {
			cancel()
			return nil, ctx.Err()
		}
		return []float64{10}, nil
	}
	rs, err = Search(ctx, stop, []int64{8, 16}, cands, time.Minute, 3, nil)
	if !errors.Is(err, context.Canceled) || len(rs) == 0 || len(rs[0].Cells) != 2 || rs[0].Complete || calls != 3 {
		t.Errorf("cancelled at the third measurement: %v, %d sizes, calls %d, first %+v", err, len(rs), calls, rs)
	}
}

// TestSearchMeasuresTheDefaultsOwnChoiceOnce: a choice that is what the
// library runs by default at a size (ErrIsDefault) gets no cell there, so
// one algorithm measured twice can never show a gain over itself; where it
// differs from the default it is measured.
func TestSearchMeasuresTheDefaultsOwnChoiceOnce(t *testing.T) {
	s := &space{rng: newRand(3), sd: 0.005}
	m := func(ctx context.Context, c Choice, size int64, n int) ([]float64, error) {
		if c.Algorithm == "ring" && c.Protocol == "simple" && size >= 1<<20 {
			return nil, ErrIsDefault
		}
		return s.measure(ctx, c, size, n)
	}
	rs, err := Search(context.Background(), m, []int64{8 << 10, 4 << 20}, cands, time.Minute, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	has := func(r Result, name string) bool {
		for _, c := range r.Cells {
			if c.Choice.String() == name {
				return true
			}
		}
		return false
	}
	if !has(rs[0], "ring/simple") || has(rs[1], "ring/simple") {
		t.Errorf("ring/simple measured at 8 KiB %v, at 4 MiB %v: want yes, no", has(rs[0], "ring/simple"), has(rs[1], "ring/simple"))
	}
	if rs[1].Best.Choice.String() == "ring/simple" {
		t.Error("the default's own choice was named best over the default")
	}
}

// TestSearchExpandsTheLeader: the expansion sees each size's first cells
// with the best known and adds its candidates to the same coarse pass;
// a candidate already measured is not measured twice.
func TestSearchExpandsTheLeader(t *testing.T) {
	s := &space{rng: newRand(3), sd: 0.005}
	var saw []string
	expand := func(r Result) []Choice {
		saw = append(saw, r.Best.Choice.String())
		lead := r.Best.Choice
		if lead.Default {
			lead = Choice{Algorithm: "ring", Protocol: "ll128", Channels: -1} // already a candidate
		}
		two := lead
		two.Channels = 2
		return []Choice{two, lead}
	}
	rs, err := SearchExpanding(context.Background(), s.measure, []int64{8 << 10, 4 << 20}, cands, expand, time.Minute, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(saw) != 2 || saw[0] != "tree/ll" || saw[1] != "ring/simple" {
		t.Errorf("expand saw leaders %v, want tree/ll then ring/simple", saw)
	}
	for _, r := range rs {
		seen := map[string]int{}
		for _, c := range r.Cells {
			seen[c.Choice.String()]++
		}
		for name, k := range seen {
			if k != 1 {
				t.Errorf("%d B: %s has %d cells", r.Size, name, k)
			}
		}
		want := map[int64]string{8 << 10: "tree/ll/2ch", 4 << 20: "ring/simple/2ch"}[r.Size]
		if seen[want] != 1 {
			t.Errorf("%d B: no cell of %s: %v", r.Size, want, seen)
		}
	}
}
