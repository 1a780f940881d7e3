package report

import (
	"fmt"
	"strings"
	"time"

	"collbench/internal/words"
	"collbench/measure"
)

// ProgressLine renders one line of a sweep's progress for ev: a bar, the
// row about to run and the time left (left < 0: not known yet).
func ProgressLine(ev measure.Progress, left time.Duration) string {
	const width = 20
	filled := 0
	if ev.Total > 0 {
		filled = ev.Done * width / ev.Total
	}
	eta := "ETA --"
	if left >= 0 {
		eta = "ETA " + left.Round(time.Second).String()
	}
	return fmt.Sprintf("[%s%s] %d/%d %s %s %s %s, %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		ev.Done+1, ev.Total, ev.Case.Coll, ev.Case.DType, ev.Case.Op, words.Bytes(ev.Size), eta)
}
