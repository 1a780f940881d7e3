package engine

import (
	"context"
	"errors"
	"fmt"
	"io"

	"collbench/determinism"
	"collbench/measure"
	"collbench/tune"
)

// Determinism is one collbench determinism run (determinism.Spec: what
// it measures) on the backend and ranks asked for.
type Determinism struct {
	determinism.Spec
	Backend, NCCLLib string
	Ranks            int
	RunFlags
	Tool string
	// OnRecord, if set, receives the record's JSON writer after every
	// cell (rank 0), so what was measured reaches disk as it is measured.
	OnRecord func(writeJSON func(io.Writer) error)
	// Progress, if set, receives a line per collective, type and choice.
	Progress func(string)
}

// Check refuses what determinism cannot judge, before any backend starts:
// a UsageError.
func (d Determinism) Check() error {
	if err := d.Spec.Check(); err != nil {
		return &UsageError{Err: err}
	}
	return nil
}

// RunDeterminism runs d and returns the report on rank 0 (nil elsewhere),
// with every cell measured so far even when the error is not nil.
func (f *System) RunDeterminism(ctx context.Context, d Determinism) (_ *determinism.Report, err error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	gr, err := f.begin(ctx, d.Backend, d.NCCLLib, d.Ranks, d.RunFlags, nil)
	if err != nil {
		return nil, err
	}
	defer func() { gr.end(err) }()
	ss := gr.SS
	b, n, rank0 := ss.Choice.Backend, ss.N, ss.PW.Rank0()
	for _, c := range d.Collectives {
		for _, t := range d.DTypes {
			if err := b.Supports(c, t, measure.Sum); err != nil {
				return nil, UsageErrorf("the %s backend cannot run %s on %s: %v", b.Name(), c, t, err)
			}
		}
	}
	if p, ok := b.(measure.ForcePreparer); ok && !d.DefaultOnly {
		if err := p.PrepareForcing(); err != nil {
			d.DefaultOnly = true
		}
	}
	if err := f.open(gr, d.RunFlags); err != nil {
		return nil, err
	}
	world := gr.World
	rep := &determinism.Report{Schema: determinism.Schema, Tool: d.Tool, Backend: b.Name(), Ranks: n, Runs: d.Runs, Seed: d.Seed, Started: f.Now(), Complete: true}
	forcer, _ := world.(measure.Forcer)
	if forcer == nil && !d.DefaultOnly {
		rep.Notes = append(rep.Notes, "only the library's own choice: "+b.Name()+" cannot be told which algorithm to run here")
	}
	o := determinism.Options{Spec: d.Spec, World: world, Forcer: forcer, N: n, Rank0: rank0,
		OnRecord: d.OnRecord, Progress: d.Progress}
	if d.CheckFile != "" {
		if forcer == nil {
			return nil, UsageErrorf("--check %s: the %s backend cannot be told which algorithm to run here", d.CheckFile, b.Name())
		}
		if o.Entries, err = tune.ReadCheck(gr.Ctx, d.CheckFile, b.Name(), n); err != nil {
			return nil, &UsageError{Err: err}
		}
		rep.Notes = append(rep.Notes, "checking "+d.CheckFile+": each size runs the choice the file names for it (the default where no line does)")
	}
	runErr := determinism.Run(gr.Ctx, o, rep)
	if refused := new(determinism.RefusedError); errors.As(runErr, &refused) {
		runErr = &UsageError{Err: refused.Err}
	}
	runErr = gr.settle(runErr, len(rep.Cells))
	rep.Finished = f.Now()
	if !rank0 {
		return nil, runErr
	}
	if runErr != nil {
		rep.Complete = false
		return rep, runErr
	}
	if d.CheckFile != "" {
		if bad := rep.Diverged(); len(bad) > 0 {
			return rep, &CheckFailedError{Msg: fmt.Sprintf("determinism --check %s: %d of %d cells diverged (first: %s)", d.CheckFile, len(bad), len(rep.Cells), bad[0])}
		}
	}
	return rep, nil
}
