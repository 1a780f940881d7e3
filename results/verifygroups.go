package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// GroupVerification is the result of `collbench verify-groups`.
type GroupVerification struct {
	Schema  string         `json:"schema"` // "collbench/verify-groups"
	Tool    Tool           `json:"tool"`
	Backend Backend        `json:"backend"`
	Ranks   int            `json:"ranks"`
	Layouts []LayoutVerify `json:"layouts"`
	OK      bool           `json:"ok"`
	// Error is why the check stopped before every layout was checked.
	Error string `json:"error,omitempty"`
}

// LayoutVerify is one layout's checks.
type LayoutVerify struct {
	Name          string     `json:"name"`
	Groups        [][]int    `json:"groups"`
	Communicators []CommInfo `json:"communicators"`
	// AllReduce is each rank's value before (r+1) and after an allreduce sum.
	AllReduce []BeforeAfter `json:"allreduce"`
	// Collectives holds each collective's outcome, in run order.
	Collectives []CollectiveVerify `json:"collectives"`
	// Stopped is set when the run stopped in this layout or before it: the
	// step that did not finish ("forming its communicators", "hypercube,
	// full check"), or NotStarted.
	Stopped string `json:"stopped,omitempty"`
}

// NotStarted is LayoutVerify.Stopped of a layout the run never reached.
const NotStarted = "not started"

// BeforeAfter is one rank's allreduce input and output.
type BeforeAfter struct {
	WorldRank int     `json:"world_rank"`
	Before    float64 `json:"before"`
	After     float64 `json:"after"`
	Want      float64 `json:"want"`
}

// CollectiveVerify is one collective's outcome in one layout: the rank r
// contributes r+1 check and the full check with random patterns.
type CollectiveVerify struct {
	Collective string `json:"collective"`
	Pass       bool   `json:"pass"`
	// SimpleWrong counts wrong elements of the r+1 check; PatternWrong of
	// the full check.
	SimpleWrong  int64      `json:"simple_wrong"`
	PatternWrong int64      `json:"pattern_wrong"`
	Mismatches   []Mismatch `json:"mismatches,omitempty"`
	Error        string     `json:"error,omitempty"`
	// Skipped says why the collective cannot run in this layout (it then
	// passes vacuously: hypercube on groups that are not powers of two).
	Skipped string `json:"skipped,omitempty"`
}

// Encoder renders a document whose rows arrive one by one, encoding each
// row once: rewriting the whole file after every row then costs a copy of
// bytes, not a new encoding of every row so far.
type Encoder struct {
	rows [][]byte
}

// Add encodes one more row.
func (e *Encoder) Add(r Row) error { return e.Set(len(e.rows), r) }

// Set encodes the row at index i of the results, replacing the one there
// (a row measured again, as each cycle of --cycles does) or, at the end,
// adding it.
func (e *Encoder) Set(i int, r Row) error {
	if i < 0 || i > len(e.rows) {
		return fmt.Errorf("results: row %d set with %d rows encoded", i, len(e.rows))
	}
	b, err := json.MarshalIndent(r, "    ", "  ")
	if err != nil {
		return err
	}
	if i == len(e.rows) {
		e.rows = append(e.rows, b)
	} else {
		e.rows[i] = b
	}
	return nil
}

// Write writes d with the rows added so far as its results (d.Results is
// ignored), in the same layout as Write.
func (e *Encoder) Write(w io.Writer, d *Document) error {
	head := *d
	head.Results = []Row{}
	b, err := json.MarshalIndent(&head, "", "  ")
	if err != nil {
		return err
	}
	marker := []byte(`"results": []`)
	i := bytes.Index(b, marker)
	if i < 0 {
		return errors.New("results: document has no results field")
	}
	var out bytes.Buffer
	out.Write(b[:i])
	out.WriteString(`"results": [`)
	for k, r := range e.rows {
		if k > 0 {
			out.WriteByte(',')
		}
		out.WriteString("\n    ")
		out.Write(r)
	}
	if len(e.rows) > 0 {
		out.WriteString("\n  ")
	}
	out.WriteByte(']')
	out.Write(b[i+len(marker):])
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}
