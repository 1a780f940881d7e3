package engine

import (
	"context"

	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// guarded is one run through the engine's one door, which every workflow
// takes (bench, tune, doctor, verify-groups, determinism): a context of its
// own, the watchdog board its guard reads, the session that joins the
// world's processes, and, once opened, the world under its guard. end
// closes them in the reverse order.
type guarded struct {
	Ctx     context.Context
	cancel  context.CancelFunc
	Board   *watchdog.Board
	SS      *Session
	World   measure.World
	Devices []results.Device
	guard   *Guard
}

// begin starts a guarded run: check refuses bad input once the world's
// size is known, before any rendezvous. The caller defers end.
func (f *System) begin(ctx context.Context, backend, ncclLib string, ranks int, rf RunFlags, check func(n int) error) (*guarded, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	board := watchdog.NewBoard()
	ctx = watchdog.WithBoard(ctx, board)
	ss, err := f.StartSession(ctx, backend, ncclLib, ranks, rf, check)
	if err != nil {
		cancel()
		return nil, err
	}
	return &guarded{Ctx: ctx, cancel: cancel, Board: board, SS: ss}, nil
}

// open opens the run's world under its guard.
func (f *System) open(g *guarded, rf RunFlags) error {
	world, devices, guard, err := f.openWatched(g.Ctx, g.cancel, g.SS, g.Board, rf)
	if err != nil {
		return err
	}
	g.World, g.Devices, g.guard = world, devices, guard
	return nil
}

// settle lets the guard say what ended the run: a rank it saw stop making
// progress, a process of the world that failed, or err; rows is what was
// measured.
func (g *guarded) settle(err error, rows int) error { return g.guard.Settle(err, rows) }

// end closes the guard, the world and the session, which is told err (a
// refusal this process reached alone reaches the other processes), then
// the run's context.
func (g *guarded) end(err error) {
	if g.guard != nil {
		g.guard.Close()
	}
	if g.World != nil {
		_ = g.World.Close()
	}
	g.SS.CloseAfter(err)
	g.cancel()
}

// classify gives a run's error its class: a fault of the world (a rank the
// watchdog or a heartbeat stopped, a process that died, a signal) as it
// is, any other a failed run.
func classify(err error) error {
	if err == nil || IsFault(err) {
		return err
	}
	return &RunError{Err: err}
}
