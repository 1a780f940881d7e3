// Package tuner is collbench's NCCL tuner plugin and its controls. The
// plugin (tuner.c, interface versions 4 and 6) is compiled into the collbench
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
	"strconv"
	"strings"
	"sync/atomic"
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

// Choice is an algorithm and protocol by NCCL's indices, a channel count
// (0: NCCL's own) and a chunk size (applied where NCCL offers the tuner
// interface version 6, 2.30 and later): Chunk bytes, or where ChunkX is
// set, that factor of the chunk NCCL computes; both 0: NCCL's own.
type Choice struct {
	Algo, Proto, Channels int
	Chunk                 int64
	ChunkX                float64
}

// ChunkPrefix marks the chunk size in a forced choice's name, in bytes or
// as a factor of NCCL's: "ring/simple/chunk524288",
// "ring/simple/8/chunkx2".
const ChunkPrefix = "chunk"

// ChunkFactors bound a chunk given as a factor of NCCL's.
const (
	MinChunkX float64 = 0.125
	MaxChunkX float64 = 8
)

// MinChunk and MaxChunk bound a forced chunk size: below a few KiB NCCL's
// steps cost more than they carry, and NCCL clamps above its buffers.
const (
	MinChunk = 4 << 10
	MaxChunk = 16 << 20
)

// ParseChoice reads "algorithm/protocol", then optionally the channels
// and a chunk size ("chunk" and bytes), by the tuner file's names.
func ParseChoice(s string) (Choice, error) {
	parts := strings.Split(strings.ToLower(s), "/")
	var chunk int64
	var factor float64
	if n := len(parts); n >= 3 && strings.HasPrefix(parts[n-1], ChunkPrefix) {
		arg := strings.TrimPrefix(parts[n-1], ChunkPrefix)
		if x, ok := strings.CutPrefix(arg, "x"); ok {
			v, err := strconv.ParseFloat(x, 64)
			if err != nil || v < MinChunkX || v > MaxChunkX {
				return Choice{}, fmt.Errorf("%q: a chunk factor must be %g to %g", s, MinChunkX, MaxChunkX)
			}
			factor = v
		} else {
			v, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || v < MinChunk || v > MaxChunk {
				return Choice{}, fmt.Errorf("%q: the chunk size must be %d to %d bytes", s, MinChunk, MaxChunk)
			}
			chunk = v
		}
		parts = parts[:n-1]
	}
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
	c.Chunk, c.ChunkX = chunk, factor
	return c, nil
}

// Force makes NCCL run every operation of the collective type fn (Funcs)
// with c from now on, in this process; Clear returns it to NCCL's own
// choice. Both also zero the type's counts.
func Force(fn int, c Choice) {
	C.cbt_reset(C.int(fn))
	chunk := c.Chunk
	if c.ChunkX > 0 {
		chunk = -int64(c.ChunkX*1000 + 0.5)
	}
	if fn >= 0 && fn < len(chunkForced) {
		chunkForced[fn].Store(chunk != 0)
	}
	C.cbt_force(C.int(fn), C.int(c.Algo), C.int(c.Proto), C.int(c.Channels), C.int64_t(chunk))
}

// chunkForced says, by collective type, whether the forced choice names a
// chunk size.
var chunkForced [16]atomic.Bool

// Clear returns fn to NCCL's own choice.
func Clear(fn int) {
	if fn >= 0 && fn < len(chunkForced) {
		chunkForced[fn].Store(false)
	}
	C.cbt_force(C.int(fn), -1, -1, 0, 0)
	C.cbt_reset(C.int(fn))
}

// Stats is what the plugin saw of a collective type since it was forced.
type Stats struct {
	// Calls are NCCL's questions; Applied the answers NCCL could follow;
	// Refused those where its table said the forced pair cannot run.
	Calls, Applied, Refused int64
	// Runnable are the pairs NCCL's last table allowed (algorithm/protocol).
	Runnable []string
	// ChunkForced says the forced choice names a chunk size.
	ChunkForced bool
	// ChunkCalls are NCCL's chunk questions (interface 6: none before
	// NCCL 2.30); ChunkNCCL the chunk NCCL computed at the last of them
	// and ChunkUsed the one it was given (bytes); ChunkApplied the answers
	// that gave the forced chunk.
	ChunkCalls, ChunkNCCL, ChunkUsed, ChunkApplied int64
}

// StatsOf is fn's counts since Force.
func StatsOf(fn int) Stats {
	var s C.cbt_stats
	C.cbt_stats_of(C.int(fn), &s)
	st := Stats{Calls: int64(s.calls), Applied: int64(s.applied), Refused: int64(s.refused),
		ChunkCalls: int64(s.chunk_calls), ChunkNCCL: int64(s.chunk_nccl), ChunkUsed: int64(s.chunk_used), ChunkApplied: int64(s.chunk_applied)}
	if fn >= 0 && fn < len(chunkForced) {
		st.ChunkForced = chunkForced[fn].Load()
	}
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
// RegBuff registered buffers, run Algo with Proto on Channels channels,
// in chunks of Chunk bytes. -1 matches any dimension; Channels <= 0 keeps
// NCCL's own count, Chunk <= 0 NCCL's chunk size.
type Line struct {
	Func                                                       int
	MinBytes, MaxBytes                                         int64
	Algo, Proto, Channels, NNodes, NRanks, NumPipeOps, RegBuff int
	Chunk                                                      int64
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
			nranks: C.int(l.NRanks), pipeops: C.int(l.NumPipeOps), regbuff: C.int(l.RegBuff), chunk: C.int64_t(l.Chunk)}
	}
	C.cbt_set_lines(&cs[0], C.int(len(cs)))
}
