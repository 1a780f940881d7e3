package measure

import (
	"fmt"
	"math"
	"time"

	"collbench/internal/words"
)

// OpFloor and BandwidthFloor bound how fast any backend can run one
// operation: no collective completes in less than a microsecond, and none
// moves its bytes faster than 10 TB/s (above every link a GPU has). They
// make FloorTime a lower bound, never an estimate of the real time.
const (
	OpFloor        = time.Microsecond
	BandwidthFloor = 10e12 // bytes per second
)

// DefaultMaxTime is the longest plan a run accepts without --max-time: a day.
const DefaultMaxTime = 24 * time.Hour

// FloorTime is the least time the plan can take on n ranks: every operation
// it issues (warm-up, timed, per-iteration, graph replays and checks, per
// half, per cycle) at OpFloor or at BandwidthFloor, whichever is slower. The
// count of cases is its upper bound for n ranks (every dtype, op and root).
func (p Plan) FloorTime(n int) (time.Duration, float64) { return p.FloorTimeAt(n, OpFloor) }

// FloorTimeAt is FloorTime with opFloor as the least time of one
// operation: the time one took on this machine, measured, where known.
func (p Plan) FloorTimeAt(n int, opFloor time.Duration) (time.Duration, float64) {
	cases := 0.0
	for _, c := range p.Collectives {
		k := float64(len(p.DTypes))
		if c.Reduces() {
			k *= float64(max(len(p.Ops), 1))
		}
		if c.Rooted() {
			if p.Roots == nil {
				k *= float64(max(n, 1))
			} else {
				k *= float64(len(p.Roots))
			}
		}
		cases += k
	}
	halves := 0.0
	if p.OutOfPlace {
		halves++
	}
	if p.InPlace {
		halves++
	}
	timed := float64(p.Iters)
	if p.GraphReplays > 0 {
		timed *= float64(p.GraphReplays)
	}
	if p.IterStats {
		timed += float64(p.Iters)
	}
	perHalf := (float64(p.Warmup)+timed)*float64(max(p.Agg, 1)) + float64(p.Check)
	var secs, ops float64
	for _, sz := range p.Sizes {
		t := math.Max(opFloor.Seconds(), float64(sz)/BandwidthFloor)
		o := perHalf * halves * cases * float64(p.CycleBound())
		ops += o
		secs += o * t
	}
	if secs >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64), ops
	}
	return time.Duration(secs * 1e9), ops
}

// CheckLength refuses a plan whose FloorTime on n ranks is above limit
// (0: no limit), naming the time, the counts behind it, and the way past.
func (p Plan) CheckLength(n int, limit time.Duration) error {
	if limit <= 0 {
		return nil
	}
	floor, ops := p.FloorTime(n)
	if floor <= limit {
		return nil
	}
	return fmt.Errorf("this plan would run for at least %s (%.3g operations of at least %v each: -w %d, -n %d, -m %d, -N %d over %d sizes); the limit is %s: lower the counts, or pass --max-time 0 (or a longer time) to run it anyway",
		words.Span(floor), ops, OpFloor, p.Warmup, p.Iters, max(p.Agg, 1), p.CycleBound(), len(p.Sizes), words.Span(limit))
}

// PlanTooLongError is a plan refused once the world was warm: at the time
// one operation took on this machine it could not finish within the
// limit. Nothing was measured.
type PlanTooLongError struct {
	Floor, PerOp, Limit time.Duration
	Ops                 float64
}

func (e *PlanTooLongError) Error() string {
	return fmt.Sprintf("this plan would run for at least %s here (%.3g operations at the time one took on this machine, %v, measured while warming up); the limit is %s: lower the counts or sizes, or pass --max-time 0 (or a longer time) to run it anyway",
		words.Span(e.Floor), e.Ops, e.PerOp.Round(10*time.Nanosecond), words.Span(e.Limit))
}
