package cli

import (
	"fmt"
	"strings"
	"time"

	"collbench/report"
	"collbench/suites"
)

// progress draws a one-line progress bar on a terminal's stderr: the
// collective, type and size being measured and the time left. It prints
// nothing when stderr is not a terminal, or with --quiet.
type progress struct {
	io    *IOStreams
	quiet bool
	start time.Time
	now   func() time.Time
	shown bool
}

func newProgress(io *IOStreams) *progress { return &progress{io: io, now: time.Now} }

// line renders the progress line for ev at elapsed.
func progressLine(ev suites.Progress, elapsed time.Duration) string {
	const width = 20
	filled := 0
	if ev.Total > 0 {
		filled = ev.Done * width / ev.Total
	}
	eta := "ETA --"
	if ev.Done > 0 {
		left := time.Duration(float64(elapsed) / float64(ev.Done) * float64(ev.Total-ev.Done))
		eta = "ETA " + left.Round(time.Second).String()
	}
	return fmt.Sprintf("[%s%s] %d/%d %s %s %s %s, %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		ev.Done+1, ev.Total, ev.Case.Coll, ev.Case.DType, ev.Case.Op, report.HumanBytes(ev.Size), eta)
}

func (p *progress) update(ev suites.Progress) {
	if !p.io.ErrTTY || p.quiet {
		return
	}
	if !p.shown {
		p.start = p.now()
	}
	fmt.Fprintf(p.io.ErrOut, "\r\033[K%s", progressLine(ev, p.now().Sub(p.start)))
	p.shown = true
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.io.ErrOut, "\r\033[K")
		p.shown = false
	}
}
