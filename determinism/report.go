package determinism

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"collbench/internal/words"
	"collbench/tunefile"
)

// Schema names the JSON report.
const Schema = "collbench/determinism"

// The checks' outcomes.
const (
	Same    = "same"
	Differs = "differs"
	NA      = "n/a"
)

// Default is the cell that forces nothing: the library's own choice.
const Default = "default"

// Cell is one collective, type, size and choice: its checks' outcomes over
// the runs.
type Cell struct {
	Collective string `json:"collective"`
	DType      string `json:"dtype"`
	Size       int64  `json:"size_bytes"`
	Choice     string `json:"choice"`
	Runs       int    `json:"runs"`
	// RunToRun: every run on fresh communicators gave run 1's bits, on
	// every rank. Ranks: every rank held rank 0's bits where the
	// collective says they agree (allreduce). SizeInvariant: each element
	// held the bits it had at the next smaller size.
	RunToRun      string `json:"run_to_run"`
	Ranks         string `json:"ranks"`
	SizeInvariant string `json:"size_invariant"`
	// History: one more run, on a fresh communicator, with the sizes
	// largest first and each call after one of another size and inputs,
	// gave run 1's bits.
	History string `json:"history"`
	// Divergences are the first divergence each failed check found.
	Divergences []Divergence `json:"divergences,omitempty"`
	// MaxULP is the largest distance of any element, on any rank and run,
	// from the exact sum (in double precision) rounded to the type.
	MaxULP uint64 `json:"max_ulp"`
	// Digest is run 1's result over every rank, for grouping choices that
	// agree.
	Digest string `json:"digest"`
	// TimeUS is the median time of one call over the runs, in µs.
	TimeUS float64 `json:"time_us"`
}

// Stable reports whether every check the cell ran passed.
func (c Cell) Stable() bool {
	return c.RunToRun != Differs && c.Ranks != Differs && c.SizeInvariant != Differs && c.History != Differs
}

// Diverged names each cell that failed a check: collective, type, size
// and choice.
func (r *Report) Diverged() []string {
	var out []string
	for _, c := range r.Cells {
		if !c.Stable() {
			out = append(out, fmt.Sprintf("%s %s %s with %s", c.Collective, c.DType, words.Bytes(c.Size), c.Choice))
		}
	}
	return out
}

// failed names the checks that failed, joined by "+".
func (c Cell) failed() string {
	var f []string
	for _, k := range []struct{ name, v string }{{"run", c.RunToRun}, {"ranks", c.Ranks}, {"size", c.SizeInvariant}, {"history", c.History}} {
		if k.v == Differs {
			f = append(f, k.name)
		}
	}
	return strings.Join(f, "+")
}

// Report is a determinism run: every cell measured, in order.
type Report struct {
	Schema   string    `json:"schema"`
	Tool     string    `json:"tool"`
	Backend  string    `json:"backend"`
	Ranks    int       `json:"ranks"`
	Runs     int       `json:"runs"`
	Seed     uint64    `json:"seed"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Complete is false when a signal or an error cut the run short: the
	// cells are what was measured.
	Complete bool     `json:"complete"`
	Notes    []string `json:"notes,omitempty"`
	Cells    []Cell   `json:"cells"`
}

// table is one collective and type: its sizes and choices, in order.
type table struct {
	coll, dtype string
	sizes       []int64
	choices     []string
	at          map[[2]any]Cell
}

func (r *Report) tables() []*table {
	var out []*table
	by := map[[2]string]*table{}
	for _, c := range r.Cells {
		k := [2]string{c.Collective, c.DType}
		t := by[k]
		if t == nil {
			t = &table{coll: c.Collective, dtype: c.DType, at: map[[2]any]Cell{}}
			by[k] = t
			out = append(out, t)
		}
		if !slices.Contains(t.sizes, c.Size) {
			t.sizes = append(t.sizes, c.Size)
		}
		if !slices.Contains(t.choices, c.Choice) {
			t.choices = append(t.choices, c.Choice)
		}
		t.at[[2]any{c.Size, c.Choice}] = c
	}
	for _, t := range out {
		slices.Sort(t.sizes)
	}
	return out
}

// WriteText writes the matrix a person reads at a glance: per collective
// and type, a row per size and a column per choice, each cell "stable" or
// the checks that failed; then which choices agree with which, the worst
// distance from the exact sum, and the first divergence of each failed
// check.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "# collbench determinism: %s, %d ranks, %d runs on fresh communicators each, seed %d\n", r.Backend, r.Ranks, r.Runs, r.Seed)
	fmt.Fprintln(w, "# a cell is stable, or names what differed: run (run to run), ranks (a rank against rank 0), size (an element as its message grew), history (after other calls)")
	for _, t := range r.tables() {
		fmt.Fprintf(w, "\n## %s %s\n", t.coll, t.dtype)
		head := append([]string{"size"}, t.choices...)
		rows := [][]string{head}
		for _, s := range t.sizes {
			row := []string{words.Bytes(s)}
			for _, ch := range t.choices {
				c, ok := t.at[[2]any{s, ch}]
				switch {
				case !ok:
					row = append(row, "-")
				case c.Stable():
					row = append(row, "stable")
				default:
					row = append(row, c.failed())
				}
			}
			rows = append(rows, row)
		}
		writeAligned(w, rows)
		for _, line := range t.agreement() {
			fmt.Fprintf(w, "# choices: %s\n", line)
		}
		var ulps []string
		for _, ch := range t.choices {
			worst := uint64(0)
			for _, s := range t.sizes {
				worst = max(worst, t.at[[2]any{s, ch}].MaxULP)
			}
			ulps = append(ulps, fmt.Sprintf("%s %d", ch, worst))
		}
		fmt.Fprintf(w, "# worst distance from the exact sum, in ulps: %s\n", strings.Join(ulps, ", "))
		for _, s := range t.sizes {
			for _, ch := range t.choices {
				c := t.at[[2]any{s, ch}]
				for _, d := range c.Divergences {
					fmt.Fprintf(w, "# first %s divergence at %s with %s: %s\n", d.Check, words.Bytes(s), ch, d.String())
				}
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "# note: %s\n", n)
	}
	stable, all := 0, len(r.Cells)
	for _, c := range r.Cells {
		if c.Stable() {
			stable++
		}
	}
	fmt.Fprintf(w, "# %d of %d cells stable%s\n", stable, all, map[bool]string{false: " (cut short: what was measured is above)"}[r.Complete])
	return nil
}

// agreement says, for each choice after the first, at how many sizes it
// gave the first choice's bits.
func (t *table) agreement() []string {
	if len(t.choices) < 2 {
		return nil
	}
	var out []string
	base := t.choices[0]
	for _, ch := range t.choices[1:] {
		same, n := 0, 0
		var first int64 = -1
		for _, s := range t.sizes {
			a, okA := t.at[[2]any{s, base}]
			b, okB := t.at[[2]any{s, ch}]
			if !okA || !okB {
				continue
			}
			n++
			if a.Digest == b.Digest {
				same++
			} else if first < 0 {
				first = s
			}
		}
		switch {
		case n == 0:
		case same == n:
			out = append(out, fmt.Sprintf("%s gives %s's bits at every size", ch, base))
		default:
			out = append(out, fmt.Sprintf("%s differs from %s at %d of %d sizes (from %s)", ch, base, n-same, n, words.Bytes(first)))
		}
	}
	return out
}

// writeAligned writes rows as right-aligned columns.
func writeAligned(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = fmt.Sprintf("%*s", width[i], c)
		}
		fmt.Fprintln(w, strings.Join(cells, " | "))
	}
}

// TunerEntries pins, for each collective and size, the fastest choice
// that was stable in every type measured, where it is not the default:
// sizes from the one before (exclusive) to this one. A size with no such
// choice pins nothing, and is named in the second return.
func (r *Report) TunerEntries(vocab tunefile.Vocabulary) ([]tunefile.Entry, []string) {
	type key struct {
		coll   string
		size   int64
		choice string
	}
	stable, took := map[key]bool{}, map[key]float64{}
	var colls []string
	sizes, choices := map[string][]int64{}, map[string][]string{}
	for _, c := range r.Cells {
		k := key{c.Collective, c.Size, c.Choice}
		if _, seen := stable[k]; !seen {
			stable[k] = true
		}
		stable[k] = stable[k] && c.Stable()
		took[k] += c.TimeUS
		if !slices.Contains(colls, c.Collective) {
			colls = append(colls, c.Collective)
		}
		if !slices.Contains(sizes[c.Collective], c.Size) {
			sizes[c.Collective] = append(sizes[c.Collective], c.Size)
		}
		if !slices.Contains(choices[c.Collective], c.Choice) {
			choices[c.Collective] = append(choices[c.Collective], c.Choice)
		}
	}
	var es []tunefile.Entry
	var none []string
	for _, coll := range colls {
		slices.Sort(sizes[coll])
		prev := int64(0)
		for _, s := range sizes[coll] {
			best := ""
			for _, ch := range choices[coll] {
				k := key{coll, s, ch}
				if stable[k] && (best == "" || took[k] < took[key{coll, s, best}]) {
					best = ch
				}
			}
			switch best {
			case "":
				none = append(none, fmt.Sprintf("%s %s", coll, words.Bytes(s)))
			case Default:
			default:
				algo, proto, _ := strings.Cut(best, "/")
				if proto == "" && len(vocab.Protocols) == 1 {
					proto = vocab.Protocols[0]
				}
				es = append(es, tunefile.Entry{Collective: strings.ReplaceAll(coll, "-", ""), MinBytes: prev + 1, MaxBytes: s, Algorithm: algo, Protocol: proto,
					Channels: -1, NNodes: -1, NRanks: r.Ranks, NumPipeOps: -1, RegBuff: -1})
			}
			prev = s
		}
	}
	return es, none
}

// WriteJSON writes the report with every cell.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTunerFile writes TunerEntries in the tuner file's format of the
// report's backend, with the sizes that had no stable choice named in a
// comment.
func (r *Report) WriteTunerFile(w io.Writer) error {
	es, none := r.TunerEntries(tunefile.VocabularyOf(r.Backend))
	comments := []string{
		fmt.Sprintf("collbench determinism, %s backend, %d ranks, %d runs each, seed %d", r.Backend, r.Ranks, r.Runs, r.Seed),
		"per size, the fastest choice whose every check passed in every type, where it is not the library's own",
	}
	if len(none) > 0 {
		comments = append(comments, "no choice was stable at: "+strings.Join(none, ", "))
	}
	if r.Backend == "nccl" {
		comments = append(comments,
			"lines name no channels, and sizes where NCCL's own choice was best have no line: collbench's tuner (NCCL_TUNER_PLUGIN=$(collbench watch --plugin-path) COLLBENCH_TUNER_FILE=this file) then keeps NCCL's own count and choice, as determinism ran them",
			"NCCL's example tuner plugin would run both on one channel: another reduction order, which this file does not pin")
	}
	return tunefile.Write(w, es, comments...)
}
