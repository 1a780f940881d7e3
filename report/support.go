package report

import (
	"fmt"
	"io"

	"collbench/measure"
)

// WriteSupport writes support matrices: one table per backend and buffer,
// a row per collective and a column per dtype, then the legend.
func WriteSupport(w io.Writer, ms []measure.SupportMatrix) error {
	for _, m := range ms {
		title := fmt.Sprintf("support: %s on %s memory", m.Backend, m.Buffer)
		if m.Note != "" {
			title += " (" + m.Note + ")"
		}
		if none(m) {
			fmt.Fprintln(w, title+": none")
			continue
		}
		fmt.Fprintln(w, title)
		tb := PlainTable(w)
		tb.Header(append([]string{"collective"}, m.DTypes...))
		for _, r := range m.Rows {
			if err := tb.Append(append([]string{r.Collective}, r.Cells...)); err != nil {
				return err
			}
		}
		if err := tb.Render(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, measure.SupportLegend)
	return nil
}

// none says whether a matrix has no cell that runs.
func none(m measure.SupportMatrix) bool {
	for _, r := range m.Rows {
		for _, c := range r.Cells {
			if c != "-" {
				return false
			}
		}
	}
	return true
}
