package nccl

import (
	"errors"
	"fmt"
	"strings"

	"collbench/backend/nccl/driver"
	"collbench/internal/syncx"
	"collbench/measure"
	"collbench/watchdog"
)

// gang is the local ranks of one communicator when one thread issues for
// all of them (--threads one). Each rank's thread runs the sweep as in the
// per-GPU mode, but hands every NCCL operation to the gang: once all have,
// the leader's thread (the first rank's) issues every share in one NCCL
// group, as NCCL's benchmark does with -g, and then every rank goes on to
// wait for its own stream.
type gang struct {
	drv     driver.Driver
	members []*rank
	// in gathers the shares, out releases the members once the leader has
	// issued them; both spin, as the world's barrier does, and both are
	// aborted with the world.
	in, out *syncx.SpinBarrier
	shares  []share
	err     error // the leader's, for the step being released
	// ranks are the members' world ranks, for the watchdog's record of
	// the leader while it issues.
	ranks []int
}

// share is one rank's part of a step: op Per times in each of N groups, or
// (op nil) the exchange P2P in one group.
type share struct {
	op     *driver.Op
	per, n int
	p2p    []driver.P2P
}

// newGang makes members a gang, the first the leader.
func newGang(drv driver.Driver, members []*rank) *gang {
	g := &gang{drv: drv, members: members, in: syncx.NewSpinBarrier(len(members)), out: syncx.NewSpinBarrier(len(members)),
		shares: make([]share, len(members))}
	for i, r := range members {
		r.gang, r.gi = g, i
		g.ranks = append(g.ranks, r.worldRank)
	}
	return g
}

// issuingGang is the gang that issues r's operations, or nil where r issues
// its own (per-GPU threads, a lone local rank, a graph being captured).
func (r *rank) issuingGang() *gang {
	if r.capturing {
		return nil
	}
	return r.gang
}

// step hands r's share of a step to the gang and returns once the leader
// has issued the whole step. A failed call is its own rank's error; the
// other ranks return an error that names that rank and wraps
// syncx.ErrAborted, so that the world names the rank at fault.
//
// For the watchdog, a member waits for the whole gang to hand in its
// shares, then for the leader; the leader, while it issues, is marked as
// issuing for every member, so that a thread stuck in the library names
// every GPU it issues for and no other.
func (g *gang) step(r *rank, s share) error {
	g.shares[r.gi] = s
	r.track.Awaits(watchdog.WaitingAll)
	if err := g.in.Wait(); err != nil {
		return err
	}
	if r.gi == 0 {
		r.track.Awaits(watchdog.NotWaiting)
		r.track.Issuing(&g.ranks)
		g.err = g.issue()
		r.track.Issuing(nil)
	} else {
		r.track.Awaits(g.ranks[0])
	}
	err := g.out.Wait()
	r.track.Awaits(watchdog.NotWaiting)
	if err != nil {
		return err
	}
	return g.errFor(r.gi)
}

// issue runs on the leader's thread: every share in one group per step.
func (g *gang) issue() error {
	first := g.shares[0]
	for i, s := range g.shares {
		if (s.op == nil) != (first.op == nil) || s.n != first.n {
			return &driver.PartError{Part: i, Err: fmt.Errorf("out of step with %s: issuing %s while it issues %s",
				g.members[0].label(), s.what(), first.what())}
		}
	}
	if first.op != nil {
		parts := make([]driver.Part, len(g.members))
		for i, m := range g.members {
			parts[i] = driver.Part{Comm: m.comm, Op: g.shares[i].op, Per: g.shares[i].per, Stream: m.stream}
		}
		return g.drv.RepeatGroup(parts, first.n)
	}
	if err := g.drv.GroupStart(); err != nil {
		return &driver.PartError{Part: -1, Err: err}
	}
	var failed error
	for i, m := range g.members {
		if err := m.comm.GroupP2P(g.shares[i].p2p, 1, driver.Rotation{}, m.stream); err != nil {
			failed = &driver.PartError{Part: i, Err: err}
			break
		}
	}
	if err := g.drv.GroupEnd(); err != nil && failed == nil {
		failed = &driver.PartError{Part: -1, Err: err}
	}
	return failed
}

// what names a share's kind in errors.
func (s share) what() string {
	if s.op != nil {
		return fmt.Sprintf("%s x%d", s.op.Kind.Call(), max(s.per, 1)*s.n)
	}
	return fmt.Sprintf("an exchange of %d sends and receives", len(s.p2p))
}

// errFor is the error member i returns from the step just issued.
func (g *gang) errFor(i int) error {
	if g.err == nil {
		return nil
	}
	var pe *driver.PartError
	if !errors.As(g.err, &pe) {
		pe = &driver.PartError{Part: -1, Err: g.err}
	}
	switch {
	case pe.Part == i:
		return pe.Err
	case pe.Part >= 0:
		return fmt.Errorf("%w (%s failed)", syncx.ErrAborted, g.members[pe.Part].label())
	case i == 0:
		return fmt.Errorf("%w (one thread issuing for %s)", pe.Err, g.gpus())
	}
	return fmt.Errorf("%w (%s failed, issuing for this GPU too)", syncx.ErrAborted, g.members[0].label())
}

// gpus lists the gang's GPUs.
func (g *gang) gpus() string {
	var b strings.Builder
	b.WriteString("GPUs ")
	for i, m := range g.members {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", m.dev.index)
	}
	return b.String()
}

// abort wakes every member waiting in a step.
func (g *gang) abort(cause error) {
	g.in.Abort(cause)
	g.out.Abort(cause)
}

// formGangs makes each list of the world's local ranks with more than one
// member a gang, when the backend issues from one thread.
func (w *world) formGangs(groups [][]*rank) {
	if w.b.threads != measure.ThreadsOne {
		return
	}
	for _, members := range groups {
		if len(members) > 1 {
			w.gangs = append(w.gangs, newGang(w.b.drv, members))
		}
	}
}

// SetThreads sets how the worlds opened from now on issue their local
// GPUs' operations: measure.ThreadsPerGPU (the default) or ThreadsOne.
func (b *Backend) SetThreads(mode string) error {
	switch mode {
	case "":
		mode = measure.ThreadsPerGPU
	case measure.ThreadsPerGPU, measure.ThreadsOne:
	default:
		return fmt.Errorf("invalid --threads %q (valid: %s)", mode, strings.Join(measure.ThreadModes(), ", "))
	}
	b.threads = mode
	return nil
}

// Threads is the issuing mode in force.
func (b *Backend) Threads() string {
	if b.threads == "" {
		return measure.ThreadsPerGPU
	}
	return b.threads
}
