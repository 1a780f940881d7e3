package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"collbench/results"
	"collbench/watch"
)

// WatchOutput is a file collbench watch keeps current: the JSON record
// (-o) or the standing findings for Prometheus (--prom).
type WatchOutput struct {
	Target *results.Output
	Prom   bool   // the Prometheus text, not the JSON record
	What   string // what the file holds, for messages
	Path   string // as the user gave it
}

// WatchJob is collbench watch as a user runs it: the collector (Watch),
// each finding printed to Findings as it comes, and Outputs rewritten
// whole after each finding and with every count, through writers that
// never hold the collector up; at the end each is written within
// FinalWrite or named as not written.
type WatchJob struct {
	Watch
	Findings   io.Writer
	Outputs    []WatchOutput
	FinalWrite time.Duration
	// OnWrote receives each output written at the end.
	OnWrote func(o WatchOutput)
}

// RunWatchJob runs j and returns the collector's verdict on what it took
// in; a rank or link that stands named at the end is a CheckFailedError.
func (f *System) RunWatchJob(ctx context.Context, j WatchJob) (string, error) {
	rec := watch.NewRecord(f.Now())
	type target struct {
		o     WatchOutput
		w     *results.LatestOutput
		write func(io.Writer) error
	}
	var targets []target
	for _, o := range j.Outputs {
		write := rec.WriteJSON
		if o.Prom {
			write = rec.WriteProm
		}
		targets = append(targets, target{o, results.NewLatestOutput(o.Target, false), write})
	}
	var mu sync.Mutex
	var writeErr error
	started := false // the collector listened: only then are the files written
	// save renders each document now (under mu) and hands it to its own
	// writer: the collector never waits on a slow disk or a pipe nobody
	// reads; a later document replaces one not yet written.
	save := func() {
		for _, tg := range targets {
			var b bytes.Buffer
			if err := tg.write(&b); err != nil && writeErr == nil {
				writeErr = &RunError{Err: err}
			}
			tg.w.Offer(b.Bytes())
		}
	}
	w := j.Watch
	onListening, onFinding, onCounts := w.OnListening, w.OnFinding, w.OnCounts
	w.OnListening = func(addr string) {
		if onListening != nil {
			onListening(addr)
		}
		mu.Lock()
		started = true
		save() // the files exist, empty of findings, from the start
		mu.Unlock()
	}
	w.OnFinding = func(fd watch.Finding) {
		if onFinding != nil {
			onFinding(fd)
		}
		mu.Lock()
		defer mu.Unlock()
		if j.Findings != nil {
			fmt.Fprintln(j.Findings, fd.String())
			if c := fd.Confirm(); c != "" {
				fmt.Fprintf(j.Findings, "  to confirm: %s\n", c)
			}
		}
		rec.Add(fd, f.Now())
		save()
	}
	w.OnCounts = func(c watch.Counts) {
		if onCounts != nil {
			onCounts(c)
		}
		mu.Lock()
		defer mu.Unlock()
		rec.SetCounts(c, f.Now())
		save()
	}
	standing, counts, err := f.RunWatch(ctx, w)
	mu.Lock()
	if !started { // refused before collecting (a usage error): nothing to keep
		mu.Unlock()
		for _, tg := range targets {
			_ = tg.w.Close(0)
		}
		return "", err
	}
	rec.SetStanding(standing, f.Now())
	rec.SetCounts(counts, f.Now())
	save()
	mu.Unlock()
	for _, tg := range targets {
		if werr := tg.w.Close(j.FinalWrite); werr != nil {
			if writeErr == nil {
				writeErr = &RunError{Err: werr}
			}
			continue
		}
		if j.OnWrote != nil {
			j.OnWrote(tg.o)
		}
	}
	switch {
	case err != nil:
		return "", err
	case writeErr != nil:
		return "", writeErr
	case len(standing) > 0:
		return "", &CheckFailedError{Msg: fmt.Sprintf("watch: %s at the end; the first: %s", watch.Tally(standing), standing[0])}
	}
	return counts.Verdict(), nil
}
