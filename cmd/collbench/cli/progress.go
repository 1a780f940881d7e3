package cli

import (
	"fmt"
	"time"

	"collbench/measure"
	"collbench/report"
)

// progress draws a one-line progress bar on a terminal's stderr: the
// collective, type and size being measured and the time left. It prints
// nothing when stderr is not a terminal, or with --quiet.
type progress struct {
	io    *IOStreams
	quiet bool
	now   func() time.Time
	shown bool
	// The rows finished so far, for the time-left model.
	est      rowCost
	last     time.Time
	lastSize int64
	started  bool
	// finish is the finishing time shown, moved a third of the way to
	// each new estimate, so that the time left counts down instead of
	// jumping with every noisy row.
	finish time.Time
}

// finishBlend is how far the shown finishing time moves to a new estimate.
const finishBlend = 1.0 / 3

// smooth returns the time left to show, given a fresh estimate.
func (p *progress) smooth(now time.Time, left time.Duration) time.Duration {
	est := now.Add(left)
	if p.finish.IsZero() {
		p.finish = est
	} else {
		p.finish = p.finish.Add(time.Duration(float64(est.Sub(p.finish)) * finishBlend))
	}
	return max(p.finish.Sub(now), 0)
}

func newProgress(io *IOStreams) *progress { return &progress{io: io, now: time.Now} }

// rowCost models a row's time as a + b*size from the rows finished, so that
// the time left follows the sizes left (a doubling sweep spends most of
// its time in its last rows), not only their count.
type rowCost struct {
	n                 float64
	sx, sy, sxx, sxy  float64
	distinct, anySize bool
	firstSize         float64
}

func (c *rowCost) add(size int64, took time.Duration) {
	x, y := float64(size), took.Seconds()
	if !c.anySize {
		c.firstSize, c.anySize = x, true
	} else if x != c.firstSize {
		c.distinct = true
	}
	c.n++
	c.sx += x
	c.sy += y
	c.sxx += x * x
	c.sxy += x * y
}

// left estimates the time of rows more rows holding bytes bytes in all;
// ok is false before any row finished.
func (c *rowCost) left(rows int, bytes int64) (time.Duration, bool) {
	if c.n == 0 {
		return 0, false
	}
	a, b := c.sy/c.n, 0.0
	if c.distinct {
		if d := c.n*c.sxx - c.sx*c.sx; d > 0 {
			b = (c.n*c.sxy - c.sx*c.sy) / d
			a = (c.sy - b*c.sx) / c.n
		}
		if b < 0 { // noise: fall back to the mean row
			a, b = c.sy/c.n, 0
		}
		if a < 0 { // all time per byte
			a, b = 0, c.sy/c.sx
		}
	}
	return time.Duration((a*float64(rows) + b*float64(bytes)) * float64(time.Second)), true
}

func (p *progress) update(ev measure.Progress) {
	if !p.io.ErrTTY || p.quiet {
		return
	}
	now := p.now()
	if p.started {
		p.est.add(p.lastSize, now.Sub(p.last))
	}
	p.last, p.lastSize, p.started = now, ev.Size, true
	left := time.Duration(-1)
	if l, ok := p.est.left(ev.Total-ev.Done, ev.BytesLeft); ok {
		left = p.smooth(now, l)
	}
	fmt.Fprintf(p.io.ErrOut, "\r\033[K%s", report.ProgressLine(ev, left))
	p.shown = true
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.io.ErrOut, "\r\033[K")
		p.shown = false
	}
}
