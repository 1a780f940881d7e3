package tune

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"collbench/internal/words"
	"collbench/report"
	"collbench/tunefile"
)

// Schema names tune's JSON document.
const Schema = "collbench/tune"

// Report is one tune run (or one tune --check): every cell measured, by
// collective and size, as data that the table, the tuner file and the
// environment are rendered from.
type Report struct {
	Schema  string `json:"schema"`
	Tool    string `json:"tool,omitempty"`
	Backend string `json:"backend"`
	Ranks   int    `json:"ranks"`
	Nodes   int    `json:"nodes"`
	// Budget is the search's time limit; Check the tuner file measured
	// against the defaults instead (tune --check).
	Budget      string       `json:"budget,omitempty"`
	Check       string       `json:"check,omitempty"`
	Started     time.Time    `json:"started"`
	Collectives []Collective `json:"collectives"`
	Notes       []string     `json:"notes,omitempty"`
	// Complete is false when the budget or a signal cut the run short.
	Complete bool `json:"complete"`
	// ExactSizes: the sizes are those a job issued (tune --from), and each
	// line of the tuner file covers its size alone, so that a size the job
	// did not issue keeps NCCL's own choice.
	ExactSizes bool `json:"exact_sizes,omitempty"`
}

// Collective is one collective's results, by size.
type Collective struct {
	Name    string   `json:"collective"`
	Results []Result `json:"results"`
}

// Set records a result of coll, replacing the one of its size (a size
// refined after its coarse pass); a size not measured at all (the budget
// or a signal ended the search first) marks the report incomplete instead.
func (r *Report) Set(coll string, res Result) {
	if len(res.Cells) == 0 {
		r.Complete = false
		return
	}
	i := slices.IndexFunc(r.Collectives, func(c Collective) bool { return c.Name == coll })
	if i < 0 {
		r.Collectives = append(r.Collectives, Collective{Name: coll})
		i = len(r.Collectives) - 1
	}
	c := &r.Collectives[i]
	if j := slices.IndexFunc(c.Results, func(x Result) bool { return x.Size == res.Size }); j >= 0 {
		c.Results[j] = res
	} else {
		c.Results = append(c.Results, res)
	}
	slices.SortFunc(c.Results, func(a, b Result) int { return int(min(max(a.Size-b.Size, -1), 1)) })
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// timeNoise renders a cell's median time with its spread.
func timeNoise(c Cell) string {
	if len(c.TimesUS) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ±%.0f%%", c.Time(), max(c.Noise(), MinNoise)*100)
}

// Verdict says what one size's result shows: the gain of the best over
// the default beyond the noise of both, the default best, or (tune
// --check) whether the file's choice reproduces a gain, is within noise
// of the default, or is slower.
func (r *Report) Verdict(res Result) string {
	if r.Check != "" {
		file := otherThan(res)
		switch {
		case file == nil:
			return "no line of the file covers this size"
		case namesOwn(res, *file):
			if slower, g := res.slower(*file); slower {
				return fmt.Sprintf("names NCCL's own choice (%.0f%% slower so)", g*100)
			}
			return "names NCCL's own choice"
		case res.Gain > 0 && (res.Confirmed || len(res.Pairs) == 0):
			return fmt.Sprintf("reproduced: %+.0f%%", res.Gain*100)
		}
		if slower, g := res.slower(*file); slower {
			return fmt.Sprintf("SLOWER than the default by %.0f%%", g*100)
		}
		return "within noise of the default"
	}
	switch {
	case res.Gain > 0 && res.Confirmed:
		return fmt.Sprintf("%+.0f%% (confirmed in %d pairs)", res.Gain*100, len(res.Pairs))
	case res.Gain > 0:
		return fmt.Sprintf("%+.0f%% (beyond both cells' noise)", res.Gain*100)
	case res.Best.Choice.Default:
		return "the default is best"
	case len(res.Pairs) > 0:
		return fmt.Sprintf("not confirmed in %d pairs: keep the default", len(res.Pairs))
	default:
		return "within noise: keep the default"
	}
}

// namesOwn says whether a file's choice is what the default ran (as the
// recorder saw it): a line that names NCCL's own choice, which a file for
// NCCL's example plugin needs wherever NCCL's own channels are not one.
func namesOwn(res Result, file Cell) bool {
	d := res.Default.Ran
	return d != nil && d.Algorithm == file.Choice.Algorithm && d.Protocol == file.Choice.Protocol &&
		(file.Choice.Channels <= 0 || file.Choice.Channels == d.Channels)
}

// slower says whether the default beat the other cell: by the pairs where
// there are any, else beyond both cells' noise.
func (res Result) slower(other Cell) (bool, float64) {
	if len(res.Pairs) > 0 {
		return res.Slower()
	}
	return Beats(res.Default, other)
}

// otherThan is the one cell of a check that is not the default, or nil.
func otherThan(res Result) *Cell {
	for i := range res.Cells {
		if !res.Cells[i].Choice.Default {
			return &res.Cells[i]
		}
	}
	return nil
}

// WriteTable writes one table per collective: size, what the default ran
// and its time, the best choice (or the file's) and its time, and the
// verdict.
func (r *Report) WriteTable(w io.Writer) error {
	second := "best"
	if r.Check != "" {
		second = "the file's"
	}
	for i, c := range r.Collectives {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "## %s on %d ranks (%s backend)\n", c.Name, r.Ranks, r.Backend)
		tb := report.PlainTable(w)
		// What the default ran, where the library's recorder said.
		ran := slices.ContainsFunc(c.Results, func(x Result) bool { return x.Default.Ran != nil })
		if ran {
			tb.Header("size", "default (µs)", "default ran", second, "its time (µs)", "cells", "verdict")
		} else {
			tb.Header("size", "default (µs)", second, "its time (µs)", "cells", "verdict")
		}
		for _, res := range c.Results {
			other := res.Best
			if r.Check != "" {
				if o := otherThan(res); o != nil {
					other = *o
				}
			}
			cells := fmt.Sprint(len(res.Cells))
			if !res.Complete {
				cells += " (cut short)"
			}
			row := []any{words.Bytes(res.Size), timeNoise(res.Default), other.Choice.String(), timeNoise(other), cells, r.Verdict(res)}
			if ran {
				row = slices.Insert(row, 2, any("-"))
				if d := res.Default.Ran; d != nil {
					row[2] = d.String()
				}
			}
			if err := tb.Append(row...); err != nil {
				return err
			}
		}
		if err := tb.Render(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "# %s\n", n)
	}
	return nil
}

// Entries are the tuner file's lines: for each collective, the sizes
// where the best choice beats the default beyond the noise of both. A
// measured size s stands for the sizes above the size measured before it
// up to s (with ExactSizes for s alone); neighbours with the same choice
// share one line.
//
// On NCCL every line names its channels, and the sizes where the default
// is kept and ran on more than one channel have lines too, naming what
// the default ran (NCCL's profiler), because NCCL's example tuner plugin
// runs every operation that no line covers, and every line whose channels
// are -1, on one channel. Sizes whose runs were not recorded keep no line
// or -1 (Unpinned names them).
func (r *Report) Entries() []tunefile.Entry {
	var out []tunefile.Entry
	pin := r.Backend == "nccl"
	for _, c := range r.Collectives {
		name := strings.ReplaceAll(c.Name, "-", "")
		var prev int64 = -1
		for _, res := range c.Results {
			lo := prev + 1
			if r.ExactSizes {
				lo = res.Size
			}
			prev = res.Size
			var ch Choice
			var chunk int64
			switch {
			case res.Gain > 0 && !res.Best.Choice.Default:
				ch = res.Best.Choice
				if pin && ch.Channels <= 0 && res.Best.Ran != nil {
					ch.Channels = res.Best.Ran.Channels
				}
				// A chunk found as a factor of NCCL's is written as the
				// bytes it ran with at this size.
				chunk = ch.Chunk
				if ch.ChunkX > 0 {
					if chunk = res.Best.ChunkBytes; chunk <= 0 {
						continue // the bytes it ran with are not known: no line
					}
				}
			case pin && res.Default.Ran != nil && res.Default.Ran.Channels != 1:
				// The example plugin would run it on one channel.
				ch = *res.Default.Ran
			default:
				continue
			}
			if n := len(out); n > 0 {
				last := &out[n-1]
				if last.Collective == name && last.MaxBytes == lo-1 && last.Algorithm == ch.Algorithm && last.Protocol == ch.Protocol && last.Channels == channels(ch) && last.Chunk == chunk {
					last.MaxBytes = res.Size
					continue
				}
			}
			out = append(out, tunefile.Entry{Collective: name, MinBytes: lo, MaxBytes: res.Size, Algorithm: ch.Algorithm, Protocol: ch.Protocol,
				Channels: channels(ch), NNodes: r.Nodes, NRanks: r.Ranks, NumPipeOps: -1, RegBuff: -1, Chunk: chunk})
		}
	}
	return out
}

func channels(c Choice) int {
	if c.Channels > 0 {
		return c.Channels
	}
	return -1
}

// Unpinned are the sizes of an NCCL report whose line in Entries cannot
// name its channels, or that have no line although NCCL's own choice there
// is unknown: the recorder did not record them ("collective size" each).
func (r *Report) Unpinned() []string {
	if r.Backend != "nccl" {
		return nil
	}
	var out []string
	for _, c := range r.Collectives {
		for _, res := range c.Results {
			gain := res.Gain > 0 && !res.Best.Choice.Default
			if (gain && res.Best.Choice.Channels <= 0 && res.Best.Ran == nil) || (!gain && res.Default.Ran == nil) {
				out = append(out, c.Name+" "+words.Bytes(res.Size))
			}
		}
	}
	return out
}

// WriteTunerFile writes Entries in the example tuner plugin's format, with
// comments that say what measured them.
func (r *Report) WriteTunerFile(w io.Writer) error {
	comments := []string{
		fmt.Sprintf("collbench tune, %s backend, %d ranks on %d nodes, %s", r.Backend, r.Ranks, r.Nodes, r.Started.UTC().Format(time.RFC3339)),
		"only the sizes where the best choice beat the default beyond the noise of both",
	}
	if r.Backend == "nccl" {
		comments[1] = "the best choice where it beat NCCL's own beyond the noise of both; elsewhere NCCL's own choice as its profiler recorded it"
		comments = append(comments, "every line names its channels: NCCL's example tuner plugin runs operations no line covers, and lines of -1 channels, on one channel")
	}
	if r.Backend == "cpu" {
		comments = append(comments, "the cpu backend's own algorithms: read by collbench tune --check, not by NCCL")
	}
	if r.ExactSizes {
		comments = append(comments, "each line covers one size the job issued (tune --from): every other size keeps the library's own choice under collbench's tuner")
	}
	if !r.Complete {
		comments = append(comments, "the search was cut short (budget or signal): sizes not measured have no line")
	}
	if u := r.Unpinned(); len(u) > 0 {
		comments = append(comments, fmt.Sprintf("NCCL's profiler did not record %d sizes, so their channels are unknown (NCCL's example plugin runs them on one channel): %s",
			len(u), strings.Join(u, ", ")))
	}
	return tunefile.Write(w, r.Entries(), comments...)
}

// Environment is the one setting that fits every size measured of every
// collective, where there is one: a choice within the noise of the best
// everywhere and beyond the default's noise somewhere, as NCCL's
// variables. "" where none fits, or on a backend without such variables.
func (r *Report) Environment() string {
	if r.Backend != "nccl" || r.Check != "" {
		return ""
	}
	var cands []Choice
	for _, c := range r.Collectives {
		for _, res := range c.Results {
			for _, cell := range res.Cells {
				if !cell.Choice.Default && !slices.Contains(cands, cell.Choice) {
					cands = append(cands, cell.Choice)
				}
			}
		}
	}
	best, bestGains := Choice{}, 0
	for _, ch := range cands {
		gains, fits := 0, true
		for _, c := range r.Collectives {
			for _, res := range c.Results {
				i := slices.IndexFunc(res.Cells, func(x Cell) bool { return x.Choice == ch })
				if i < 0 {
					fits = false
					break
				}
				if beaten, _ := Beats(res.Best, res.Cells[i]); beaten {
					fits = false
					break
				}
				if ok, _ := Beats(res.Cells[i], res.Default); ok {
					gains++
				}
			}
		}
		if fits && gains > bestGains {
			best, bestGains = ch, gains
		}
	}
	if bestGains == 0 {
		return ""
	}
	env := "NCCL_ALGO=" + best.Algorithm + " NCCL_PROTO=" + best.Protocol
	if best.Channels > 0 {
		env += fmt.Sprintf(" NCCL_MIN_NCHANNELS=%d NCCL_MAX_NCHANNELS=%d", best.Channels, best.Channels)
	}
	return env
}

// Slower are the sizes of a check where the file's choice was slower than
// the default beyond the noise of both ("" for none).
func (r *Report) Slower() []string {
	var out []string
	if r.Check == "" {
		return nil
	}
	for _, c := range r.Collectives {
		for _, res := range c.Results {
			if f := otherThan(res); f != nil && !namesOwn(res, *f) {
				if slower, g := res.slower(*f); slower {
					out = append(out, fmt.Sprintf("%s %s: %s is %.0f%% slower than the default", c.Name, words.Bytes(res.Size), f.Choice, g*100))
				}
			}
		}
	}
	return out
}
