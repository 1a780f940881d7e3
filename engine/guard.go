package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"collbench/backend/cpu"
	"collbench/bootstrap"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// RunFlags are the flags every command that runs collectives shares: where
// this process's GPU is, and how long each kind of wait may last.
type RunFlags struct {
	Device           int
	BootstrapTimeout time.Duration
	// Timeout is the watchdog's bound: how long the world may make no
	// progress at all before the stuck ranks are named and the run stops.
	Timeout time.Duration
	// HeartbeatTimeout is how long a process may go unheard before it is
	// named as stopped.
	HeartbeatTimeout time.Duration
	// Mem is the memory asked for with --mem: "host", "device", or "" for
	// the backend's own.
	Mem string
	// Threads is how a process with several GPUs issues their operations
	// (--threads: measure.ThreadModes), "" for the backend's default.
	Threads string
}

func (o RunFlags) Validate() error {
	switch {
	case o.BootstrapTimeout <= 0:
		return UsageErrorf("invalid --bootstrap-timeout %v: must be positive (e.g. 2m)", o.BootstrapTimeout)
	case o.Timeout < 0:
		return UsageErrorf("invalid --timeout %v: must be positive, or 0 to turn the watchdog off", o.Timeout)
	case o.Timeout > 0 && o.Timeout < MinTimeout:
		// Below it, a healthy rank between two heartbeats, or a GPU
		// finishing one large operation, would be named as stuck.
		return UsageErrorf("invalid --timeout %v: must be at least %v (the time a world may make no progress at all), or 0 to turn the watchdog off", o.Timeout, MinTimeout)
	case o.Mem != "" && o.Mem != "host" && o.Mem != "device":
		return UsageErrorf("invalid --mem %q (valid: host, device)", o.Mem)
	case o.Threads != "" && !slices.Contains(measure.ThreadModes(), o.Threads):
		return UsageErrorf("invalid --threads %q (valid: %s)", o.Threads, strings.Join(measure.ThreadModes(), ", "))
	case o.HeartbeatTimeout < 2*bootstrap.DefaultBeatEvery:
		return UsageErrorf("invalid --heartbeat-timeout %v: must be at least %v", o.HeartbeatTimeout, 2*bootstrap.DefaultBeatEvery)
	}
	return nil
}

// Silence is the heartbeat bound a world uses: never longer than the
// watchdog's, so a stopped process is named within --timeout.
func (o RunFlags) Silence() time.Duration {
	if o.Timeout > 0 && o.Timeout < o.HeartbeatTimeout {
		return max(o.Timeout, 2*bootstrap.DefaultBeatEvery)
	}
	return o.HeartbeatTimeout
}

// MinTimeout is the shortest watchdog bound --timeout takes.
const MinTimeout = time.Second

// HardExitGrace is how long a run may take to stop after a fault before a
// process started by Main exits anyway (its rows are on disk already).
const HardExitGrace = 15 * time.Second

// Guard protects one run: the watchdog, a fault reported by another
// process, and prompt cancellation all abort the world, so no rank stays
// blocked, and the first fault becomes the run's error.
type Guard struct {
	f      *System
	ctx    context.Context
	cancel context.CancelFunc
	pw     *ProcessWorld
	world  measure.World
	mu     sync.Mutex
	fault  error
	stop   context.CancelFunc
}

// StartGuard starts watching a run on world. board holds this process's
// ranks' progress; devices and hosts name ranks in verdicts.
func (f *System) StartGuard(ctx context.Context, cancel context.CancelFunc, ss *Session, world measure.World,
	board *watchdog.Board, timeout time.Duration, devices []results.Device) *Guard {
	wctx, stop := context.WithCancel(ctx)
	g := &Guard{f: f, ctx: ctx, cancel: cancel, pw: ss.PW, world: world, stop: stop}
	who := Namer(ss, devices)
	tcp, _ := ss.PW.CtlTCP()
	if tcp != nil {
		tcp.SetStatus(func() []byte { return board.Encode(time.Now()) })
		tcp.OnPeerLost(g.OnFault)
		if tcp.Rank() == 0 {
			tcp.OnLoadedPeer(func(r int, quiet time.Duration) {
				fmt.Fprintf(f.Stderr, "collbench: %s was not heard from for %v, but its process is alive and running on this machine: the machine is loaded; it is named only if it stays silent for three heartbeat bounds\n",
					who(r), quiet.Round(time.Second))
			})
		}
		// With one rank per process, a process's rank is its world rank:
		// a receive of the control connection marks whom the rank waits
		// for, so a rank stuck in a collective is told from those that
		// wait for it in a gather of results.
		if rs := world.Ranks(); len(rs) == 1 && tcp.Size() == world.Size() && rs[0].WorldRank() == tcp.Rank() {
			tr := board.For(rs[0].WorldRank())
			tcp.OnWait(func(r int) {
				if r < 0 {
					tr.Waiting(watchdog.NotWaiting)
				} else {
					tr.Waiting(r)
				}
			})
		}
	}
	// Cancellation (a signal, or a fault) aborts the world at once.
	context.AfterFunc(ctx, func() {
		if a, ok := world.(measure.Aborter); ok {
			a.Abort(context.Cause(ctx))
		}
		if g.FirstFault() == nil && ss.PW.Multi() {
			var sc *SignalCause
			if errors.As(context.Cause(ctx), &sc) {
				ss.PW.Ctl.Abort(context.Canceled)
			}
		}
	})
	judge := !ss.PW.Multi() || ss.PW.Ctl.Rank() == 0 || tcp == nil
	records := func() []watchdog.Record { return board.Snapshot(time.Now()) }
	if judge && tcp != nil {
		// The judge sees every process's ranks through their heartbeats.
		records = func() []watchdog.Record {
			now := time.Now()
			recs := board.Snapshot(now)
			for r := 1; r < tcp.Size(); r++ {
				payload, seen := tcp.PeerStatus(r)
				if rs, err := watchdog.Decode(payload, now.Sub(seen)); err == nil {
					recs = append(recs, rs...)
				}
			}
			return recs
		}
	}
	setStuckNow(records, who)
	if judge && timeout > 0 {
		go watchdog.Watch(wctx, watchdog.Interval(timeout), timeout, records, who, func(v *watchdog.Verdict) {
			pe := &bootstrap.PeerError{Kind: bootstrap.FaultHung, Rank: v.Stuck[0], Msg: "watchdog: " + v.Msg}
			if tcp != nil && v.Stuck[0] != tcp.Rank() {
				// A process unheard for several heartbeats is stopped or cut
				// off rather than stuck in an operation.
				if _, seen := tcp.PeerStatus(v.Stuck[0]); seen.UnixNano() > 0 && time.Since(seen) > 3*bootstrap.DefaultBeatEvery {
					pe.Kind = bootstrap.FaultSilent
					pe.Msg = fmt.Sprintf("%s stopped answering: not heard from for %v (stopped, frozen or cut off from the network); %s",
						who(v.Stuck[0]), time.Since(seen).Round(time.Second), "watchdog: "+v.Msg)
				}
			}
			if ss.PW.Multi() {
				ss.PW.Ctl.Abort(pe) // tells every process; this one's handler stops it
				if tcp == nil {
					g.OnFault(pe)
				}
				return
			}
			g.OnFault(pe)
		})
	}
	return g
}

// OnFault records the first fault and stops the run: the context is
// cancelled and the world aborted, so ranks blocked in a collective return.
func (g *Guard) OnFault(err error) {
	g.mu.Lock()
	first := g.fault == nil
	if first {
		g.fault = err
	}
	g.mu.Unlock()
	if !first {
		return
	}
	g.pw.MarkFaulted()
	// The bound starts before anything that could block: an abort that
	// never returns must not keep the process.
	if g.f.OwnsProcess {
		time.AfterFunc(HardExitGrace, func() {
			msg := fmt.Sprintf("%v (the run did not stop within %v of the abort; exiting)", err, HardExitGrace)
			fmt.Fprintf(g.f.Stderr, "collbench: %s\n", msg)
			ExitBecause(ExitCode(err), msg)
		})
	}
	g.cancel()
	if a, ok := g.world.(measure.Aborter); ok {
		a.Abort(err)
	}
}

func (g *Guard) FirstFault() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fault
}

// Close stops the watchdog.
func (g *Guard) Close() { g.stop() }

// Cause turns the error a run ended with into the fault that caused it:
// another process's failure rather than the broken connection that
// reported it here, a watchdog verdict, or the signal that stopped it.
func (g *Guard) Cause(runErr error, rows int) error {
	if f := g.FirstFault(); f != nil {
		return f
	}
	if g.pw.Multi() && (g.ctx.Err() == nil || errors.As(runErr, new(*cpu.LinkError))) {
		// In a world of processes an error here is most often the echo of
		// another process's fault (a broken connection, a message cut
		// short by a peer that stopped): the control connection says
		// which within moments.
		deadline := time.After(3 * time.Second)
		for g.FirstFault() == nil {
			select {
			case <-deadline:
				return runErr
			case <-time.After(20 * time.Millisecond):
			}
		}
		return g.FirstFault()
	}
	if g.ctx.Err() != nil {
		var sc *SignalCause
		if errors.As(context.Cause(g.ctx), &sc) {
			return &SignalError{Sig: sc.Sig, Rows: rows}
		}
		return &SignalError{Sig: os.Interrupt, Rows: rows}
	}
	return runErr
}

// Namer names a world rank with its host and device, for verdicts.
func Namer(ss *Session, devices []results.Device) func(int) string {
	bus := map[int]string{}
	for _, d := range devices {
		if d.BusID != "" {
			bus[d.Rank] = d.BusID
		}
	}
	var pids []int
	if tcp, ok := ss.PW.CtlTCP(); ok {
		pids = tcp.PIDs()
	}
	return func(r int) string {
		host := "?"
		if r >= 0 && r < len(ss.Hosts) {
			host = ss.Hosts[r]
		}
		switch {
		case bus[r] != "":
			return fmt.Sprintf("rank %d (%s, GPU %s)", r, host, bus[r])
		case r < len(pids) && pids[r] > 0:
			return fmt.Sprintf("rank %d (%s, pid %d)", r, host, pids[r])
		}
		return fmt.Sprintf("rank %d (%s)", r, host)
	}
}

// Settle turns the error a run ended with into its cause (see Cause) and,
// in a world of processes, tells the others of a failure of this one's
// own. It returns nil for nil.
func (g *Guard) Settle(runErr error, rows int) error {
	if runErr == nil {
		return nil
	}
	runErr = g.Cause(runErr, rows)
	if IsFault(runErr) {
		g.pw.MarkFaulted()
	} else if g.pw.Multi() {
		g.pw.Ctl.Abort(runErr)
	}
	return runErr
}

// openWatched opens the session's world on this process's device, lists
// every rank's device, and starts the guard of the run; the caller closes
// the guard, then the world.
func (f *System) openWatched(ctx context.Context, cancel context.CancelFunc, ss *Session, board *watchdog.Board, rf RunFlags) (measure.World, []results.Device, *Guard, error) {
	world, err := f.OpenWorld(ctx, ss.Choice.Backend, ss.PW, ss.N, rf.Device)
	if err != nil {
		return nil, nil, nil, err
	}
	devices, err := WorldDevices(world)
	if err != nil {
		_ = world.Close() // the run stops here; its error is the one to report
		return nil, nil, nil, &RunError{Err: err}
	}
	return world, devices, f.StartGuard(ctx, cancel, ss, world, board, rf.Timeout, devices), nil
}

// stuckNow describes what the ranks of the run in progress are doing; set
// by StartGuard, read by a process that exits on a signal (StuckNow).
var stuckNow atomic.Pointer[func() string]

func setStuckNow(records func() []watchdog.Record, who func(int) string) {
	f := func() string {
		recs := records()
		quiet := time.Duration(-1)
		for _, r := range recs {
			if r.Phase != watchdog.Done && (quiet < 0 || r.Quiet() < quiet) {
				quiet = r.Quiet()
			}
		}
		if quiet < 0 {
			return ""
		}
		// Judged with the bound the ranks have already been quiet for,
		// the verdict names who is stuck and on what, and for how long.
		if v := watchdog.Judge(recs, max(quiet, time.Millisecond), who); v != nil {
			return v.Msg
		}
		return ""
	}
	stuckNow.Store(&f)
}

// Guarded says whether a run has been guarded in this process: its rows,
// if any, are on disk as measured.
func Guarded() bool { return stuckNow.Load() != nil }

// StuckNow says what the ranks of the run in progress are stuck in, ""
// when no run is guarded.
func StuckNow() string {
	if f := stuckNow.Load(); f != nil {
		return (*f)()
	}
	return ""
}

// SignalGrace is how long a process started by Main may take to stop after
// SIGINT or SIGTERM before it exits anyway: the rows measured are on disk
// already, and a library call stuck on a GPU cannot be waited for.
const SignalGrace = 4 * time.Second
