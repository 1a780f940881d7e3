package engine

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"collbench/measure"
	"collbench/tune"
)

// Tune is one collbench tune run: for each collective and size, the
// library's own choice and every algorithm it can be forced to, each
// measured and verified, within a budget; or, with Check, a tuner file's
// choices measured against the defaults.
type Tune struct {
	// Plan gives the collectives, sizes, the type and op (the first of
	// each), iterations, warm-up and checks of every measurement.
	Plan             measure.Plan
	Backend, NCCLLib string
	Ranks            int
	// Budget bounds the search's wall time; Repeats is how often a leader
	// is measured again (at least 3).
	Budget  time.Duration
	Repeats int
	// Check names a tuner file to measure against the defaults instead.
	Check string
	// WantRanks, where set, is the rank count the sizes were recorded on
	// (tune --from): a world of another size is refused, and the tuner
	// file's lines cover exactly the sizes measured (the job's own).
	WantRanks int
	RunFlags
	Tool string
	// OnReady, if set, runs once the backend is chosen, before any rank is
	// opened; rank0 says whether this process writes the report.
	OnReady func(choice BackendChoice, rank0 bool) error
	// Progress, if set, receives a line per size measured (rank 0).
	Progress func(string)
	// OnRecord, if set, receives the report's JSON writer after every
	// result, so what was measured reaches disk as it is measured (rank 0).
	OnRecord func(writeJSON func(io.Writer) error)
}

// DefaultTuneBudget is tune's time limit when none is given.
const DefaultTuneBudget = 2 * time.Minute

// RunTune runs t and returns the report on rank 0 (nil elsewhere): every
// cell measured so far even when the error is not nil (a budget cut is no
// error; a signal is a *SignalError; wrong elements a *CheckFailedError).
// With Check, a file choice slower than the default beyond the noise of
// both is a *CheckFailedError.
func (f *System) RunTune(ctx context.Context, t Tune) (_ *tune.Report, err error) {
	if t.Budget <= 0 {
		return nil, UsageErrorf("--budget %v: give the search some time, e.g. --budget 2m", t.Budget)
	}
	plan := t.Plan
	plan.DTypes, plan.Ops = plan.DTypes[:1], plan.Ops[:1]
	plan.OutOfPlace, plan.InPlace, plan.Cycles, plan.Stable = true, false, 0, false
	gr, err := f.begin(ctx, t.Backend, t.NCCLLib, t.Ranks, t.RunFlags, func(n int) error {
		if t.WantRanks > 0 && n != t.WantRanks {
			return UsageErrorf("--from: the job's communicator had %d ranks, this world has %d: run tune on as many GPUs as the job (-g %d, or launch -n %d)", t.WantRanks, n, t.WantRanks, t.WantRanks)
		}
		if err := plan.Validate(n); err != nil {
			return &UsageError{Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer func() { gr.end(err) }()
	ctx, ss, board := gr.Ctx, gr.SS, gr.Board
	b, n, rank0 := ss.Choice.Backend, ss.N, ss.PW.Rank0()
	entries, err := tune.ReadCheck(ctx, t.Check, b.Name(), n)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	if t.OnReady != nil {
		if err := t.OnReady(ss.Choice, rank0); err != nil {
			return nil, err
		}
	}
	if p, ok := b.(measure.ForcePreparer); ok {
		if err := p.PrepareForcing(); err != nil {
			return nil, UsageErrorf("nothing to tune: %v", err)
		}
	}
	if err := f.open(gr, t.RunFlags); err != nil {
		return nil, err
	}
	world := gr.World
	forcer, ok := world.(measure.Forcer)
	if !ok {
		why := "NCCL's algorithm cannot be forced per operation here"
		if b.Name() == "cpu" {
			why = "the cpu backend's ranks in one process meet in shared memory, with one algorithm"
		}
		return nil, UsageErrorf("nothing to tune: %s; tune the cpu backend across processes (collbench launch -n 4 -- tune --backend cpu)", why)
	}
	hosts := map[string]bool{}
	for _, h := range ss.Hosts {
		hosts[h] = true
	}
	rep := &tune.Report{Schema: tune.Schema, Tool: t.Tool, Backend: b.Name(), Ranks: n, Nodes: len(hosts), Check: t.Check, Started: f.Now(), Complete: true,
		ExactSizes: t.WantRanks > 0}
	if t.Check == "" {
		rep.Budget = t.Budget.String()
	}
	runErr := tune.Run(ctx, tune.Options{Plan: plan, World: world, Forcer: forcer, Backend: b, N: n, Board: board, Rank0: rank0,
		Budget: t.Budget, Repeats: t.Repeats, Check: t.Check, Entries: entries, Progress: t.Progress, OnReport: onReport(t.OnRecord)}, rep)
	var wrong *tune.WrongError
	var nothing *tune.NothingError
	switch {
	case errors.As(runErr, &wrong):
		runErr = &CheckFailedError{Msg: wrong.Msg}
	case errors.As(runErr, &nothing):
		runErr = &UsageError{Err: nothing}
	}
	runErr = gr.settle(runErr, 0)
	if !rank0 {
		return nil, runErr
	}
	if runErr != nil {
		rep.Complete = false
		return rep, runErr
	}
	if slower := rep.Slower(); len(slower) > 0 {
		return rep, &CheckFailedError{Msg: "tune --check: " + strings.Join(slower, "; ")}
	}
	return rep, nil
}

// onReport hands each report's JSON writer to onRecord (nil: none).
func onReport(onRecord func(func(io.Writer) error)) func(*tune.Report) {
	if onRecord == nil {
		return nil
	}
	return func(rep *tune.Report) { onRecord(rep.WriteJSON) }
}
