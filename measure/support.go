package measure

import (
	"errors"
	"strings"

	"collbench/dtype"
)

// SupportMatrix says which collectives, dtypes and ops one backend runs on
// one kind of buffer (host or device memory).
type SupportMatrix struct {
	Backend string       `json:"backend"`
	Buffer  string       `json:"buffer"`
	Note    string       `json:"note,omitempty"`
	DTypes  []string     `json:"dtypes"`
	Rows    []SupportRow `json:"rows"`
}

// SupportRow is one collective's cells, one per dtype of the matrix: the
// ops a reduction runs ("all", or a list), "yes" for a collective that
// moves data, "bytes" where the backend moves the elements as raw bytes
// because its library has no such type, and "-" where it cannot run.
type SupportRow struct {
	Collective string   `json:"collective"`
	Cells      []string `json:"cells"`
}

// SupportLegend explains the cells of a SupportMatrix.
const SupportLegend = `cells: the ops a reduction runs ("all" = sum, prod, max, min, avg; "no avg" = all but avg); "yes" a collective that only moves data; ` +
	`"bytes" moved as raw bytes (the library has no such type; exact, no conversion); "-" not supported`

// BuildSupport fills a matrix from a backend's rules: supports says why a
// combination cannot run (nil if it can), and asBytes whether a data-moving
// collective carries the dtype as raw bytes. A nil supports makes every cell
// "-" (a buffer the backend cannot use here; note says why).
func BuildSupport(backend, buffer, note string, supports func(Collective, dtype.DType, ReduceOp) error, asBytes func(dtype.DType) bool) SupportMatrix {
	m := SupportMatrix{Backend: backend, Buffer: buffer, Note: note}
	for _, t := range dtype.All() {
		m.DTypes = append(m.DTypes, t.String())
	}
	for _, c := range AllCollectives() {
		row := SupportRow{Collective: c.String()}
		for _, t := range dtype.All() {
			row.Cells = append(row.Cells, supportCell(c, t, supports, asBytes))
		}
		m.Rows = append(m.Rows, row)
	}
	return m
}

func supportCell(c Collective, t dtype.DType, supports func(Collective, dtype.DType, ReduceOp) error, asBytes func(dtype.DType) bool) string {
	if supports == nil {
		return "-"
	}
	ok := func(op ReduceOp) bool {
		err := supports(c, t, op)
		return err == nil || !errors.Is(err, ErrUnsupported)
	}
	if !c.Reduces() {
		switch {
		case !ok(NoOp):
			return "-"
		case asBytes != nil && asBytes(t):
			return "bytes"
		}
		return "yes"
	}
	var ops []string
	for _, op := range AllOps() {
		if ok(op) {
			ops = append(ops, op.String())
		}
	}
	switch {
	case len(ops) == 0:
		return "-"
	case len(ops) == len(AllOps()):
		return "all"
	case len(ops) == len(AllOps())-1 && !ok(Avg):
		return "no avg"
	}
	return strings.Join(ops, ",")
}
