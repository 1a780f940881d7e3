package cli

import (
	"fmt"

	"collbench/report"
	"collbench/suites"
)

// progress shows the runner's position on a terminal's stderr; it prints
// nothing when stderr is not a terminal.
type progress struct {
	io    *IOStreams
	shown bool
}

func newProgress(io *IOStreams) *progress { return &progress{io: io} }

func (p *progress) update(ev suites.Progress) {
	if !p.io.ErrTTY {
		return
	}
	line := fmt.Sprintf("[%d/%d] %s %s %s %s", ev.Done+1, ev.Total, ev.Case.Coll, ev.Case.DType, ev.Case.Op, report.HumanBytes(ev.Size))
	fmt.Fprintf(p.io.ErrOut, "\r\033[K%s", line)
	p.shown = true
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.io.ErrOut, "\r\033[K")
		p.shown = false
	}
}
