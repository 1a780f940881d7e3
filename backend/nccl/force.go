package nccl

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"collbench/backend/nccl/tuner"
	"collbench/measure"
)

// forcing is what the backend knows of its tuner plugin: whether NCCL is
// to load it (PrepareForcing, before the first communicator), and the
// plugin's init count before the first world, so a world can tell whether
// NCCL loaded it.
type forcing struct {
	mu        sync.Mutex
	asked, on bool
	why       string
	inits     int
}

// PrepareForcing makes NCCL load collbench's tuner plugin in this process,
// so that a world can force NCCL's algorithm and protocol per collective
// (measure.Forcer). It must run before the first communicator; its error
// says why forcing cannot work (NCCL too old, a tuner of the user's own).
func (b *Backend) PrepareForcing() error {
	f := &b.force
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.asked {
		f.asked = true
		f.inits = tuner.Inits()
		f.on, f.why = tuner.Prepare(b.lib.Version, os.Getenv, os.Setenv)
	}
	if !f.on {
		return fmt.Errorf("NCCL's choices cannot be forced: %s", f.why)
	}
	return nil
}

// forceable says whether this world's communicators loaded the tuner.
func (w *world) forceable() (bool, string) {
	f := &w.b.force
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.asked:
		return false, "collbench's tuner plugin was not prepared before NCCL started"
	case !f.on:
		return false, f.why
	case tuner.Inits() <= f.inits:
		return false, fmt.Sprintf("NCCL did not load collbench's tuner plugin (%s=%s)", tuner.EnvPlugin, tuner.StaticPlugin)
	}
	return true, ""
}

// tunerFunc is the tuner's name of c, if NCCL asks a tuner about it.
func tunerFunc(c measure.Collective) (int, bool) {
	fn, ok := tuner.Funcs[strings.ReplaceAll(c.String(), "-", "")]
	return fn, ok
}

// forceChoices are the algorithm and protocol pairs collbench tune tries
// per collective on NCCL: ring everywhere, tree for allreduce, PAT for
// allgather and reduce-scatter (NCCL runs it with one GPU per node), each
// with its protocols. NVLink SHARP (nvls) is never tried: collbench keeps
// it off. CollNet needs a network collective plugin and is left out.
var forceChoices = map[string][]string{
	"allreduce":     {"ring/ll", "ring/ll128", "ring/simple", "tree/ll", "tree/ll128", "tree/simple"},
	"allgather":     {"ring/ll", "ring/ll128", "ring/simple", "pat/simple"},
	"reducescatter": {"ring/ll", "ring/ll128", "ring/simple", "pat/simple"},
	"broadcast":     {"ring/ll", "ring/ll128", "ring/simple"},
	"reduce":        {"ring/ll", "ring/ll128", "ring/simple"},
}

// Choices are the pairs c can be forced to on ranks ranks (measure.Forcer),
// none where the tuner is not loaded or on one rank.
func (w *world) Choices(c measure.Collective, ranks int) []string {
	if ok, _ := w.forceable(); !ok || ranks < 2 {
		return nil
	}
	if _, ok := tunerFunc(c); !ok {
		return nil
	}
	return append([]string(nil), forceChoices[strings.ReplaceAll(c.String(), "-", "")]...)
}

// Force makes every operation of c in this process run with algo
// ("algorithm/protocol" or "algorithm/protocol/channels") from now on;
// "" returns c to NCCL's own choice (measure.Forcer).
func (w *world) Force(c measure.Collective, algo string) error {
	fn, ok := tunerFunc(c)
	if !ok {
		return fmt.Errorf("NCCL's choice for %s cannot be forced: NCCL asks a tuner only about broadcast, reduce, allgather, reduce-scatter and allreduce", c)
	}
	if algo == "" {
		tuner.Clear(fn)
		return nil
	}
	if ok, why := w.forceable(); !ok {
		return fmt.Errorf("cannot force %s to %s: %s", c, algo, why)
	}
	ch, err := tuner.ParseChoice(algo)
	if err != nil {
		return err
	}
	tuner.Force(fn, ch)
	return nil
}

// Forced says whether every operation of c since Force ran with the forced
// choice, and if not, why (measure.ForceReporter).
func (w *world) Forced(c measure.Collective) (bool, string) {
	fn, ok := tunerFunc(c)
	if !ok {
		return false, fmt.Sprintf("NCCL asks no tuner about %s", c)
	}
	st := tuner.StatsOf(fn)
	switch {
	case st.Calls == 0:
		return false, fmt.Sprintf("NCCL did not ask collbench's tuner about %s", c)
	case st.Refused > 0:
		return false, fmt.Sprintf("NCCL cannot run it here (%d of %d operations; it can: %s)", st.Refused, st.Calls, strings.Join(st.Runnable, ", "))
	case st.ChunkForced && st.ChunkCalls == 0:
		return false, "this NCCL asks no tuner for the chunk size (NCCL 2.30 and later do, through the tuner interface 6)"
	case st.ChunkForced && st.ChunkApplied < st.ChunkCalls:
		return false, fmt.Sprintf("the forced chunk size was applied to %d of %d operations", st.ChunkApplied, st.ChunkCalls)
	}
	return true, ""
}

// Chunk is the chunk size NCCL computed for the last forced operation of
// c and the one it ran with (measure.ChunkReporter); 0, 0 where NCCL did
// not ask collbench's tuner (before 2.30).
func (w *world) Chunk(c measure.Collective) (int64, int64) {
	fn, ok := tunerFunc(c)
	if !ok {
		return 0, 0
	}
	st := tuner.StatsOf(fn)
	if st.ChunkCalls == 0 {
		return 0, 0
	}
	return st.ChunkNCCL, st.ChunkUsed
}
