package tune

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
	"collbench/tunefile"
	"collbench/watchdog"
)

// Options are one search's (or one check's) world and settings, as the
// engine opened them: tune's driver measures through them, step by step,
// rank 0 deciding and every process following.
type Options struct {
	Plan   measure.Plan
	World  measure.World
	Forcer measure.Forcer
	// Backend and N are the world's backend and rank count; Board is the
	// watchdog's, which the runner reports progress to.
	Backend measure.Backend
	N       int
	Board   *watchdog.Board
	Rank0   bool
	// Vocab is the tuner file's words for the backend (its own where
	// left zero).
	Vocab tunefile.Vocabulary
	// Budget bounds the search's wall time; Repeats is how often a leader
	// is measured again; Check names the tuner file whose Entries are
	// measured against the defaults instead of searching.
	Budget  time.Duration
	Repeats int
	Check   string
	Entries []tunefile.Entry
	// Progress, if set, receives a line per size measured (rank 0);
	// OnReport the report after every result.
	Progress func(string)
	OnReport func(*Report)
}

// WrongError reports a measurement whose elements were wrong.
type WrongError struct{ Msg string }

func (e *WrongError) Error() string { return e.Msg }

// NothingError says none of the collectives asked for has a choice to
// tune on the backend: a usage error.
type NothingError struct{ Msg string }

func (e *NothingError) Error() string { return e.Msg }

func nothingToTune(format string, a ...any) error {
	return &NothingError{Msg: fmt.Sprintf(format, a...)}
}

// Run measures on every process of the world, rank 0 leading: the search
// (or the check of o.Entries), into rep, which rank 0 fills.
func Run(ctx context.Context, o Options, rep *Report) error {
	if o.Vocab.Backend == "" && o.Backend != nil {
		o.Vocab = tunefile.VocabularyOf(o.Backend.Name())
	}
	tr := &tuner{ctx: ctx, o: o, plan: o.Plan, world: o.World, forcer: o.Forcer, b: o.Backend, n: o.N, board: o.Board, rep: rep, rank0: o.Rank0,
		vocab: o.Vocab, ran: map[ranKey]Choice{}, refused: map[string]int{}, strayed: map[string]string{}, chunks: map[ranKey]int64{}}
	if o.Rank0 {
		return tr.lead(o.Entries, o.Vocab)
	}
	return tr.follow()
}

// ReadCheck reads the tuner file at path ("" gives none) in the words of
// backend, for Options.Entries on a world of n ranks: a problem names the
// file and line; a file whose every line is for another rank count is
// refused.
func ReadCheck(ctx context.Context, path, backend string, n int) ([]tunefile.Entry, error) {
	if path == "" {
		return nil, nil
	}
	es, err := tunefile.ReadFile(ctx, path, tunefile.VocabularyOf(backend))
	if err != nil {
		return nil, err
	}
	return es, tunefile.ForRanks(es, path, n)
}

// tuneStep is what rank 0 tells every process to measure next.
type tuneStep struct {
	Stop    bool   `json:"stop,omitempty"`
	Coll    int    `json:"coll"` // index into the plan's collectives
	Algo    string `json:"algo,omitempty"`
	Size    int64  `json:"size"`
	Repeats int    `json:"repeats"`
	// NoRecord leaves the library's recorder off: what this cell runs
	// is known already (each recording is one more chance for NCCL
	// 2.28.3's profiler stall, which ends recording for the run).
	NoRecord bool `json:"norecord,omitempty"`
}

// tuner runs a tune on one process: rank 0 leads (decides every step and
// tells the others), the others follow.
type tuner struct {
	ctx    context.Context
	o      Options
	plan   measure.Plan
	world  measure.World
	forcer measure.Forcer
	b      measure.Backend
	n      int
	board  *watchdog.Board
	rep    *Report
	rank0  bool
	// asDefault counts, per choice, the sizes where it is what the
	// default runs (measured once there, as the default).
	asDefault map[string]int
	vocab     tunefile.Vocabulary
	// ran is what the library's recorder says each measured cell ran
	// (NCCL's profiler), by collective, size and choice (rank 0).
	ran map[ranKey]Choice
	// refused counts, per collective and choice, the sizes where the
	// library could not run a forced choice; strayed names a forced choice
	// the recorder saw run as another (a size where it did).
	refused map[string]int
	strayed map[string]string
	// chunks are the chunk sizes forced cells ran with (bytes), by
	// collective, size and choice (rank 0's plugin); chunkAsked says NCCL
	// asked collbench's tuner for one (2.30 and later), chunkRan what the
	// last step's forced operations ran with.
	chunks     map[ranKey]int64
	chunkAsked bool
	chunkRan   int64
	// refusal is why the library last refused a forced choice.
	refusal string
	// cur names the step being measured, for the notes of the measuring.
	cur string
	// warmed says the world's warm-up ran: a communicator's first
	// operations run slow (4x H200: tune's first allreduce of 8 B 30.5 µs
	// against 10.9-12.4 in its later repeats), so the first step starts
	// with it, as a sweep's first row does, and no other step pays for it.
	warmed bool
	// oneChannel and uncovered are the sizes of a check on NCCL whose
	// line names no channels, and that no line covers: NCCL's example
	// plugin runs both on one channel.
	oneChannel, uncovered []string
}

// ranKey names one cell: a collective (index), a size and a choice.
type ranKey struct {
	coll   int
	size   int64
	choice string
}

// forceName is how a choice is forced (measure.Forcer): the algorithm
// alone where the vocabulary has one protocol (the cpu backend), else
// algorithm/protocol, with /channels where they are forced.
func forceName(c Choice, v tunefile.Vocabulary) string {
	if c.Default {
		return ""
	}
	if len(v.Protocols) < 2 {
		return c.Algorithm
	}
	s := c.Algorithm + "/" + c.Protocol
	if c.Channels > 0 {
		s += "/" + strconv.Itoa(c.Channels)
	}
	switch {
	case c.ChunkX > 0:
		s += "/chunkx" + strconv.FormatFloat(c.ChunkX, 'g', -1, 64)
	case c.Chunk > 0:
		s += "/chunk" + strconv.FormatInt(c.Chunk, 10)
	}
	return s
}

// choiceOf reads a forced name back as a choice of the vocabulary.
func choiceOf(s string, v tunefile.Vocabulary) Choice {
	parts := strings.Split(s, "/")
	c := Choice{Algorithm: parts[0], Protocol: v.Protocols[0], Channels: -1}
	if len(parts) > 1 {
		c.Protocol = parts[1]
	}
	if len(parts) > 2 {
		if n, err := strconv.Atoi(parts[2]); err == nil {
			c.Channels = n
		}
	}
	return c
}

// recorded is the choice a row's recorder saw, in the vocabulary's names
// (NCCL's profiler says RING, SIMPLE, 4), or false where none was recorded.
func recorded(a *results.AlgoChoice) (Choice, bool) {
	if a == nil || a.Algo == "" {
		return Choice{}, false
	}
	c := Choice{Algorithm: strings.ToLower(a.Algo), Protocol: strings.ToLower(a.Proto), Channels: -1}
	if n, err := strconv.Atoi(a.Channels); err == nil && n > 0 {
		c.Channels = n
	}
	return c, true
}

// agree makes every process take rank 0's step.
func (tr *tuner) agree(s *tuneStep) error { return measure.Agree(measure.ControlOf(tr.world), s) }

// step measures one choice of one collective at one size, repeats times,
// on every process, and returns rank 0's times (µs) and what its recorder
// saw run (nil where nothing was recorded). A forced choice the library
// could not run is ErrRefused, on every process alike.
func (tr *tuner) step(s tuneStep) ([]float64, *Choice, error) {
	c := tr.plan.Collectives[s.Coll]
	if err := tr.forcer.Force(c, s.Algo); err != nil {
		return nil, nil, err
	}
	defer func() { _ = tr.forcer.Force(c, "") }()
	var ran *Choice
	p := tr.plan
	p.Collectives, p.Sizes = []measure.Collective{c}, []int64{s.Size}
	p.NoRecord = p.NoRecord || s.NoRecord
	tr.cur = fmt.Sprintf("%s %s with %s", c, words.Bytes(s.Size), algoName(s.Algo))
	cases, err := p.Cases(tr.b, tr.n)
	if err != nil {
		return nil, nil, err
	}
	var times []float64
	for i := 0; i < s.Repeats; i++ {
		rn := &measure.Runner{World: tr.world, Plan: p, Cases: cases, Board: tr.board, SkipWorldWarmup: tr.warmed, OnNote: tr.libNote}
		rows, err := rn.Run(tr.ctx)
		if err != nil {
			return times, ran, err
		}
		tr.warmed = true
		for _, r := range rows {
			if h := r.OutOfPlace; h != nil {
				if h.Wrong != nil && *h.Wrong > 0 {
					return times, ran, &WrongError{Msg: fmt.Sprintf("tune: %s with %s gave %d wrong elements at %s", c, algoName(s.Algo), *h.Wrong, words.Bytes(s.Size))}
				}
				times = append(times, h.TimeUS)
			}
			if got, ok := recorded(r.Algorithm); ok && ran == nil {
				ran = &got
			}
		}
	}
	if fr, ok := tr.forcer.(measure.ForceReporter); ok && s.Algo != "" {
		if done, why := fr.Forced(c); !done {
			return nil, nil, fmt.Errorf("%s with %s: %s: %w", c, s.Algo, why, ErrRefused)
		}
	}
	tr.chunkRan = 0
	if cr, ok := tr.forcer.(measure.ChunkReporter); ok && s.Algo != "" {
		if computed, used := cr.Chunk(c); computed > 0 {
			tr.chunkAsked, tr.chunkRan = true, used
		}
	}
	return times, ran, nil
}

func algoName(a string) string { return cmp.Or(a, "its default algorithm") }

// isDefault says whether c is what the world runs c's collective with by
// default at size (the world's own account, rank 0's).
func (tr *tuner) isDefault(coll measure.Collective, c Choice, size int64) bool {
	ex, ok := tr.world.(measure.Explainer)
	if !ok {
		return false
	}
	a := ex.Algorithm(coll, size, tr.n)
	return a != nil && strings.EqualFold(a.Algo, c.Algorithm)
}

// follow runs the steps rank 0 sends until it says stop.
func (tr *tuner) follow() error {
	for {
		var s tuneStep
		if err := tr.agree(&s); err != nil {
			return err
		}
		if s.Stop {
			return nil
		}
		if _, _, err := tr.step(s); err != nil && !errors.Is(err, ErrRefused) {
			return err
		}
	}
}

// lead searches (or checks a file) on rank 0, telling the others each
// step, and tells them to stop at the end whatever happened.
func (tr *tuner) lead(entries []tunefile.Entry, vocab tunefile.Vocabulary) (err error) {
	defer func() {
		stop := tuneStep{Stop: true}
		if e := tr.agree(&stop); err == nil && e != nil && tr.ctx.Err() == nil {
			err = e
		}
	}()
	measureFor := func(ci int) Measure {
		return func(ctx context.Context, c Choice, size int64, repeats int) ([]float64, error) {
			chunked := c.Chunk > 0 || c.ChunkX > 0
			if !c.Default && !chunked && tr.o.Check == "" && tr.isDefault(tr.plan.Collectives[ci], c, size) {
				tr.asDefault[c.String()]++
				return nil, ErrIsDefault
			}
			_, known := tr.ran[ranKey{ci, size, c.String()}]
			s := tuneStep{Coll: ci, Size: size, Repeats: repeats, Algo: forceName(c, vocab), NoRecord: known}
			if err := tr.agree(&s); err != nil {
				return nil, err
			}
			ts, ran, err := tr.step(s)
			if err != nil && ctx.Err() != nil {
				return ts, ctx.Err()
			}
			if err == nil && tr.chunkRan > 0 {
				tr.chunks[ranKey{ci, size, c.String()}] = tr.chunkRan
			}
			name := tr.plan.Collectives[ci].String()
			if errors.Is(err, ErrRefused) {
				tr.refused[name+" "+c.String()]++
				tr.refusal = err.Error()
				return nil, ErrRefused
			}
			if err == nil && ran != nil {
				if !c.Default && (ran.Algorithm != c.Algorithm || ran.Protocol != c.Protocol || (c.Channels > 0 && ran.Channels > 0 && ran.Channels != c.Channels)) {
					// Forced, yet recorded running another: not the choice.
					tr.strayed[name+" "+c.String()] = fmt.Sprintf("%s as %s", words.Bytes(size), ran)
					return nil, ErrRefused
				}
				tr.ran[ranKey{ci, size, c.String()}] = *ran
				if def, ok := tr.ran[ranKey{ci, size, Choice{Default: true}.String()}]; ok && !c.Default && !chunked && tr.o.Check == "" && def == *ran {
					// Forced to what NCCL runs anyway: the default itself,
					// which forcing alone can make look faster (2x H200:
					// allreduce 128 KiB, ring/LL on NCCL's 16 channels).
					tr.asDefault[c.String()]++
					return nil, ErrIsDefault
				}
			}
			return ts, err
		}
	}
	if tr.o.Check != "" {
		return tr.check(entries, measureFor)
	}
	deadline := time.Now().Add(tr.o.Budget)
	type todo struct {
		ci    int
		cands []Choice
	}
	var work []todo
	for ci, c := range tr.plan.Collectives {
		var cands []Choice
		for _, a := range tr.forcer.Choices(c, tr.n) {
			cands = append(cands, choiceOf(a, vocab))
		}
		if len(cands) == 0 {
			tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s: the %s backend runs it one way only: nothing to tune", c, tr.b.Name()))
			continue
		}
		work = append(work, todo{ci, cands})
	}
	if len(work) == 0 {
		can := "allreduce across processes"
		if tr.b.Name() == "nccl" {
			can = "broadcast, reduce, allgather, reduce-scatter and allreduce on 2 or more GPUs"
		}
		return nothingToTune("none of the collectives asked for has a choice to tune on the %s backend (it has for: %s)", tr.b.Name(), can)
	}
	for i, w := range work {
		// Each collective gets an equal share of what is left.
		share := time.Until(deadline) / time.Duration(len(work)-i)
		name := tr.plan.Collectives[w.ci].String()
		tr.asDefault = map[string]int{}
		_, err := SearchExpanding(tr.ctx, measureFor(w.ci), tr.moving(w.ci), w.cands, tr.grid(w.ci), share, tr.o.Repeats, func(r Result) {
			tr.annotate(w.ci, &r)
			tr.rep.Set(name, r)
			if !r.Complete {
				tr.rep.Complete = false
			}
			tr.say(name+" "+words.Bytes(r.Size)+searchStage(r), r)
		})
		// Every choice found to be the default, the channel grid's too.
		for _, ch := range slices.Sorted(maps.Keys(tr.asDefault)) {
			tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s: %s is what the default runs at %d of the sizes: measured once there, as the default", name, ch, tr.asDefault[ch]))
		}
		for _, ch := range w.cands {
			if k := tr.refused[name+" "+ch.String()]; k > 0 {
				tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s: %s cannot run here at %d of the sizes: left out there", name, ch, k))
			}
			if at := tr.strayed[name+" "+ch.String()]; at != "" {
				tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s: %s was forced, yet recorded running another (%s): left out there", name, ch, at))
			}
		}
		if err != nil {
			tr.rep.Complete = false
			if errors.Is(err, context.Canceled) || tr.ctx.Err() != nil {
				return tr.ctx.Err()
			}
			return err
		}
	}
	return nil
}

// channelCounts are the channel counts tried with a size's leading
// algorithm and protocol, up to the most channels NCCL has been seen to
// run this collective with (forcing more than a communicator has is not
// asked of NCCL).
var channelCounts = []int{2, 4, 8, 16, 32}

// channelGrid expands a size's candidates on NCCL (a vocabulary with
// protocols to choose): the leader's algorithm and protocol, as NCCL's
// profiler recorded them (r annotated), on each count other than the one
// it ran with (channelCounts). nil on the cpu backend.
func (tr *tuner) channelGrid() Expand {
	if len(tr.vocab.Protocols) < 2 {
		return nil
	}
	most := 0
	return func(r Result) []Choice {
		for _, c := range r.Cells {
			if c.Ran != nil {
				most = max(most, c.Ran.Channels)
			}
		}
		ran := r.Best.Ran
		if ran == nil || ran.Channels <= 0 {
			return nil
		}
		var out []Choice
		for _, n := range channelCounts {
			if n != ran.Channels && n <= most {
				out = append(out, Choice{Algorithm: ran.Algorithm, Protocol: ran.Protocol, Channels: n})
			}
		}
		return out
	}
}

// chunkNote says what a file's chunk sizes are measured as.
const chunkNote = "the file's chunk sizes (its eleventh field) are measured as collbench's tuner plugin applies them, on NCCL 2.30 and later; NCCL's example tuner plugin ignores that field"

// chunkFactors are the chunk sizes tried with a size's leading algorithm
// and protocol, as factors of the chunk NCCL computes, where NCCL takes one
// from its tuner (2.30 and later).
var chunkFactors = []float64{0.25, 0.5, 2, 4}

// grid expands a size's candidates: the channel grid, and where NCCL has
// asked collbench's tuner for the chunk size (tuner interface 6) the
// leader's algorithm and protocol with each chunk factor.
func (tr *tuner) grid(ci int) Expand {
	channels := tr.channelGrid()
	if channels == nil {
		return nil
	}
	return func(r Result) []Choice {
		tr.annotate(ci, &r)
		out := channels(r)
		ran := r.Best.Ran
		if !tr.chunkAsked || ran == nil || ran.Algorithm == "" {
			return out
		}
		for _, x := range chunkFactors {
			out = append(out, Choice{Algorithm: ran.Algorithm, Protocol: ran.Protocol, Channels: -1, ChunkX: x})
		}
		return out
	}
}

// libNote keeps a note of the measuring (the library's recorder stopped,
// say) once, for the report's notes.
func (tr *tuner) libNote(n string) {
	if !tr.rank0 || slices.ContainsFunc(tr.rep.Notes, func(x string) bool { return strings.HasPrefix(x, n) }) {
		return
	}
	tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s (first while measuring %s)", n, tr.cur))
}

// annotate gives each cell of r what the recorder saw it run.
func (tr *tuner) annotate(ci int, r *Result) {
	set := func(c *Cell) {
		if ran, ok := tr.ran[ranKey{ci, r.Size, c.Choice.String()}]; ok {
			c.Ran = &ran
		}
		if c.Choice.Chunk > 0 || c.Choice.ChunkX > 0 {
			c.ChunkBytes = tr.chunks[ranKey{ci, r.Size, c.Choice.String()}]
		}
	}
	for i := range r.Cells {
		set(&r.Cells[i])
	}
	set(&r.Default)
	set(&r.Best)
}

// say reports one result, what is named, on the progress line and to
// OnReport.
func (tr *tuner) say(what string, r Result) {
	if tr.o.Progress != nil {
		tr.o.Progress(what + ": " + tr.rep.Verdict(r))
	}
	if tr.o.OnReport != nil {
		tr.o.OnReport(tr.rep)
	}
}

// moving is the plan's sizes at which collective ci moves data on this
// world: below one element per rank (allgather of 8 B on 4 ranks) the
// library discards the operation, and there is nothing to tune. A note
// names the sizes left out.
func (tr *tuner) moving(ci int) []int64 {
	c := tr.plan.Collectives[ci]
	esz := tr.plan.DTypes[0].Size()
	var out []int64
	var none []string
	for _, size := range tr.plan.Sizes {
		if measure.GeometryFor(c, size, esz, tr.n, 0).Count == 0 {
			none = append(none, words.Bytes(size))
			continue
		}
		out = append(out, size)
	}
	if len(none) > 0 {
		tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s: nothing moves at %s on %d ranks (under one %s per rank): left out", c, strings.Join(none, ", "), tr.n, tr.plan.DTypes[0]))
	}
	return out
}

// searchStage names how far the search has taken r, for the progress
// line: a size is reported once after its first pass, again once its
// leaders are measured again, and again once a gain is tried in pairs,
// and only the last says what stands.
func searchStage(r Result) string {
	switch {
	case len(r.Pairs) > 0:
		return " (in pairs)"
	case r.Refined:
		return " (measured again)"
	}
	return " (first pass)"
}

// check measures, at every size of the plan, the default and the file's
// choice for it, alternating, Repeats times each.
func (tr *tuner) check(entries []tunefile.Entry, measureFor func(int) Measure) error {
	reps := max(tr.o.Repeats, MinPairs)
	deadline := time.Now().Add(tr.o.Budget)
	for ci, c := range tr.plan.Collectives {
		name := strings.ReplaceAll(c.String(), "-", "")
		if !slices.ContainsFunc(entries, func(e tunefile.Entry) bool { return e.Collective == name }) {
			continue
		}
		m := measureFor(ci)
		for _, size := range tr.moving(ci) {
			if tr.ctx.Err() != nil || time.Now().After(deadline) {
				tr.rep.Complete = false
				return tr.ctx.Err()
			}
			cells := []Cell{{Choice: Choice{Default: true}}}
			e, ok := tunefile.Match(entries, name, size, tr.n, tr.rep.Nodes)
			if !ok {
				// No line covers it: the plugin leaves it to the default,
				// and there is nothing to compare (NCCL's example plugin
				// runs it on one channel: a note says so).
				if tr.b.Name() == "nccl" {
					tr.uncovered = append(tr.uncovered, c.String()+" "+words.Bytes(size))
				}
				r := Result{Size: size, Cells: cells, Complete: true}
				tr.rep.Set(c.String(), r)
				continue
			}
			file := Choice{Algorithm: e.Algorithm, Protocol: e.Protocol, Channels: e.Channels, Chunk: e.Chunk}
			if tr.b.Name() == "nccl" {
				// What NCCL's example plugin runs with the line: one
				// channel where it names none.
				file, _ = ExamplePluginChoice(entries, name, size, tr.n, tr.rep.Nodes)
				if e.Channels <= 0 {
					tr.oneChannel = append(tr.oneChannel, c.String()+" "+words.Bytes(size))
				}
				// The chunk, the eleventh field, is collbench's plugin's:
				// NCCL's example plugin ignores it (a note says so).
				file.Chunk = e.Chunk
				if e.Chunk > 0 && !slices.Contains(tr.rep.Notes, chunkNote) {
					tr.rep.Notes = append(tr.rep.Notes, chunkNote)
				}
			}
			cells = append(cells, Cell{Choice: file})
			refused := false
			for i := 0; i < reps && !refused; i++ {
				// Each pair in turn starts with the other cell, so an
				// order effect cannot pass for a difference.
				for j := range cells {
					k := (i + j) % len(cells)
					ts, err := m(tr.ctx, cells[k].Choice, size, 1)
					if errors.Is(err, ErrRefused) {
						// The library cannot run the file's choice here:
						// the plugin would leave it to the default too.
						tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%s %s: the file's %s cannot run here (%s)", c, words.Bytes(size), cells[k].Choice, tr.refusal))
						cells, refused = cells[:1], true
						break
					}
					if err != nil {
						return err
					}
					cells[k].TimesUS = append(cells[k].TimesUS, ts...)
				}
			}
			var r Result
			if len(cells) == 2 {
				r = NewPairedResult(size, cells[0], cells[1])
			} else {
				r = NewResult(size, cells)
			}
			tr.annotate(ci, &r)
			tr.rep.Set(c.String(), r)
			tr.say(c.String()+" "+words.Bytes(r.Size), r)
		}
	}
	if len(tr.oneChannel) > 0 {
		tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%d sizes have a line of channels -1, measured on one channel as NCCL's example tuner plugin runs them: %s",
			len(tr.oneChannel), strings.Join(tr.oneChannel, ", ")))
	}
	if len(tr.uncovered) > 0 {
		tr.rep.Notes = append(tr.rep.Notes, fmt.Sprintf("%d sizes have no line: collbench's plugin leaves them to NCCL, NCCL's example tuner plugin runs them on one channel: %s",
			len(tr.uncovered), strings.Join(tr.uncovered, ", ")))
	}
	if len(tr.rep.Collectives) == 0 {
		return nothingToTune("--check %s: no line of the file is for the collectives asked for (%s)", tr.o.Check, collNames(tr.plan.Collectives))
	}
	return nil
}

func collNames(cs []measure.Collective) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return strings.Join(out, ", ")
}
