// Package tuner is collbench's NCCL tuner plugin and its controls. The
// plugin (tuner.c, interface version 4) is compiled into the collbench
// binary and exported from it, as the profiler plugin is: with
// NCCL_TUNER_PLUGIN=STATIC_PLUGIN, NCCL looks it up in the process. It
// leaves NCCL's choice alone until collbench forces one for a collective
// type (collbench tune); then NCCL runs every operation of that type with
// the forced algorithm and protocol wherever its cost table allows them,
// and the plugin counts the operations where the table did not.
package tuner

/*
#cgo LDFLAGS: -rdynamic
#include "tuner.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"
)

// EnvPlugin is NCCL's variable naming its tuner plugin.
const EnvPlugin = "NCCL_TUNER_PLUGIN"

// StaticPlugin is the EnvPlugin value that makes NCCL look the plugin up
// in the process.
const StaticPlugin = "STATIC_PLUGIN"

// MinVersion is the first NCCL that looks a plugin up in the process
// (STATIC_PLUGIN, 2.26); interface version 4 is older (2.24).
const MinVersion = 22600

// Algorithms are NCCL's algorithms by index, by the names tuner files use.
var Algorithms = []string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}

// Protocols are NCCL's protocols by index.
var Protocols = []string{"ll", "ll128", "simple"}

// FuncNames are NCCL's collective types a tuner is asked about, in the
// order of ncclFunc_t, by the names tuner files use: the one list the
// plugin, the tuner file (tunefile.Collectives) and the fake GPU machine read.
var FuncNames = []string{"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}

// Funcs are FuncNames' indices (ncclFunc_t) by name.
var Funcs = func() map[string]int {
	m := map[string]int{}
	for i, n := range FuncNames {
		m[n] = i
	}
	return m
}()

// Prepare decides, before NCCL opens its first communicator, whether NCCL
// is to load collbench's tuner, and sets NCCL_TUNER_PLUGIN if so. It
// returns false and why not: NCCL too old, or a tuner of the user's own.
func Prepare(version int, getenv func(string) string, setenv func(string, string) error) (bool, string) {
	if version < MinVersion {
		return false, fmt.Sprintf("NCCL %d.%d.%d cannot load a tuner from the process (2.26 and later can)", version/10000, version/100%100, version%100)
	}
	switch v := getenv(EnvPlugin); {
	case v == StaticPlugin:
	case v != "":
		return false, fmt.Sprintf("%s=%s is the user's own tuner; unset it to let collbench force NCCL's choices", EnvPlugin, v)
	default:
		if err := setenv(EnvPlugin, StaticPlugin); err != nil {
			return false, fmt.Sprintf("cannot set %s: %v", EnvPlugin, err)
		}
	}
	return true, ""
}

// Inits is how many communicators NCCL has introduced to the plugin in
// this process: a world whose communicators did not raise it runs without.
func Inits() int { return int(C.cbt_inits()) }

// Choice is an algorithm and protocol by NCCL's indices, and a channel
// count (0: NCCL's own).
type Choice struct {
	Algo, Proto, Channels int
}

// ParseChoice reads "algorithm/protocol" or "algorithm/protocol/channels"
// by the tuner file's names.
func ParseChoice(s string) (Choice, error) {
	parts := strings.Split(strings.ToLower(s), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Choice{}, fmt.Errorf("%q: want algorithm/protocol, e.g. ring/ll128", s)
	}
	c := Choice{Algo: slices.Index(Algorithms, parts[0]), Proto: slices.Index(Protocols, parts[1])}
	if c.Algo < 0 {
		return Choice{}, fmt.Errorf("%q: unknown algorithm %q (NCCL's: %s)", s, parts[0], strings.Join(Algorithms, ", "))
	}
	if c.Proto < 0 {
		return Choice{}, fmt.Errorf("%q: unknown protocol %q (NCCL's: %s)", s, parts[1], strings.Join(Protocols, ", "))
	}
	if len(parts) == 3 {
		if _, err := fmt.Sscanf(strings.TrimSuffix(parts[2], "ch"), "%d", &c.Channels); err != nil || c.Channels < 1 || c.Channels > 64 {
			return Choice{}, fmt.Errorf("%q: channels must be 1 to 64", s)
		}
	}
	return c, nil
}

// Force makes NCCL run every operation of the collective type fn (Funcs)
// with c from now on, in this process; Clear returns it to NCCL's own
// choice. Both also zero the type's counts.
func Force(fn int, c Choice) {
	C.cbt_reset(C.int(fn))
	C.cbt_force(C.int(fn), C.int(c.Algo), C.int(c.Proto), C.int(c.Channels))
}

// Clear returns fn to NCCL's own choice.
func Clear(fn int) {
	C.cbt_force(C.int(fn), -1, -1, 0)
	C.cbt_reset(C.int(fn))
}

// Stats is what the plugin saw of a collective type since it was forced.
type Stats struct {
	// Calls are NCCL's questions; Applied the answers NCCL could follow;
	// Refused those where its table said the forced pair cannot run.
	Calls, Applied, Refused int64
	// Runnable are the pairs NCCL's last table allowed (algorithm/protocol).
	Runnable []string
}

// StatsOf is fn's counts since Force.
func StatsOf(fn int) Stats {
	var s C.cbt_stats
	C.cbt_stats_of(C.int(fn), &s)
	st := Stats{Calls: int64(s.calls), Applied: int64(s.applied), Refused: int64(s.refused)}
	for a := range Algorithms {
		for p := range Protocols {
			if int(s.last_avail)&(1<<(a*len(Protocols)+p)) != 0 {
				st.Runnable = append(st.Runnable, Algorithms[a]+"/"+Protocols[p])
			}
		}
	}
	return st
}

// Line is a tuner file's line by NCCL's indices (Funcs, Algorithms,
// Protocols): for operations of Func of MinBytes to MaxBytes on NNodes
// nodes and NRanks ranks, with NumPipeOps operations in the group and
// RegBuff registered buffers, run Algo with Proto on Channels channels.
// -1 matches any dimension; Channels <= 0 keeps NCCL's own count.
type Line struct {
	Func                                                       int
	MinBytes, MaxBytes                                         int64
	Algo, Proto, Channels, NNodes, NRanks, NumPipeOps, RegBuff int
}

// SetLines gives the plugin a tuner file's lines, in the file's order:
// an operation no forced choice covers runs with the first line that
// covers it, where NCCL's cost table lets it. Only the first call counts
// (the lines are set before NCCL asks, and never change).
func SetLines(ls []Line) {
	if len(ls) == 0 {
		return
	}
	cs := make([]C.cbt_line, len(ls))
	for i, l := range ls {
		cs[i] = C.cbt_line{_func: C.int(l.Func), min_bytes: C.int64_t(l.MinBytes), max_bytes: C.int64_t(l.MaxBytes),
			algo: C.int(l.Algo), proto: C.int(l.Proto), channels: C.int(l.Channels), nnodes: C.int(l.NNodes),
			nranks: C.int(l.NRanks), pipeops: C.int(l.NumPipeOps), regbuff: C.int(l.RegBuff)}
	}
	C.cbt_set_lines(&cs[0], C.int(len(cs)))
}
