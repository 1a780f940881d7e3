package fakegpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

// The machine's side of NCCL's tuner plugin interface, versions 4 and 6,
// declared here on their own (not shared with collbench's plugin), so the
// plugin is called as NCCL calls it: a cost table of 7 algorithms by 3
// protocols in one block, -1 where a pair cannot run; from version 6
// (NCCL 2.30) an init with the communicator's id and, once the choice is
// made, the chunk size NCCL computed, which the plugin may change.
typedef struct {
	const char *name;
	int (*init)(size_t, size_t, void *, void **);
	int (*getCollInfo)(void *, int, size_t, int, float **, int, int, int, int *);
	int (*destroy)(void *);
} ft_v4;

typedef struct {
	const char *name;
	int (*init)(void **, uint64_t, size_t, size_t, void *, void *, void *);
	int (*getCollInfo)(void *, int, size_t, int, float **, int, int, int, int *);
	int (*finalize)(void *);
	int (*getChunkSize)(void *, int, size_t, int, int, int, size_t *);
} ft_v6;

static ft_v4 *ft_plugin; // getCollInfo and destroy sit where they do in version 6
static ft_v6 *ft_plugin6;

static int ft_load(int want6) {
	void *h = dlopen(NULL, RTLD_NOW | RTLD_LOCAL);
	if (!h) return 0;
	if (want6 && (ft_plugin6 = (ft_v6 *)dlsym(h, "ncclTunerPlugin_v6")) != NULL) {
		ft_plugin = (ft_v4 *)ft_plugin6;
		return 6;
	}
	ft_plugin6 = NULL;
	ft_plugin = (ft_v4 *)dlsym(h, "ncclTunerPlugin_v4");
	return ft_plugin != NULL ? 4 : 0;
}

static void *ft_init(size_t ranks, size_t nodes, int *err) {
	void *ctx = NULL;
	if (ft_plugin6) *err = ft_plugin6->init(&ctx, 0, ranks, nodes, NULL, NULL, NULL);
	else *err = ft_plugin->init(ranks, nodes, NULL, &ctx);
	return ctx;
}

static size_t ft_chunk(void *ctx, int func, size_t bytes, int algo, int proto, int channels, size_t chunk) {
	if (ft_plugin6 && ft_plugin6->getChunkSize) ft_plugin6->getChunkSize(ctx, func, bytes, algo, proto, channels, &chunk);
	return chunk;
}

static int ft_ask(void *ctx, int func, size_t bytes, float *table, int *channels) {
	return ft_plugin->getCollInfo(ctx, func, bytes, 1, (float **)table, 7, 3, 0, channels);
}

static void ft_destroy(void *ctx) { ft_plugin->destroy(ctx); }
*/
import "C"

import (
	"os"
	"strings"

	"collbench/backend/nccl/driver"
	"collbench/backend/nccl/tuner"
	"collbench/dtype"
)

// NCCL's algorithm and protocol indices and names as its profiler reports
// them, and the collective types a tuner is asked about, from the one list
// collbench's tuner plugin reads (backend/nccl/tuner).
var (
	algoNames  = upper(tuner.Algorithms)
	protoNames = upper(tuner.Protocols)
	// tunerFuncs are ncclFunc_t's values by operation: tuner.FuncNames'
	// indices, matched by the NCCL call's name (ncclAllReduce: allreduce).
	tunerFuncs = func() map[driver.OpKind]int {
		m := map[driver.OpKind]int{}
		for _, k := range []driver.OpKind{driver.Broadcast, driver.Reduce, driver.AllGather, driver.ReduceScatter, driver.AllReduce} {
			if i, ok := tuner.Funcs[strings.ToLower(strings.TrimPrefix(k.Call(), "nccl"))]; ok {
				m[k] = i
			}
		}
		return m
	}()
)

const (
	algoTree, algoRing                       = 0, 1
	protoLL, protoLL128, protoSimple         = 0, 1, 2
	nAlgos, nProtos                          = 7, 3
	tunerMinVersion                          = 22600
	tunerChunkVersion                        = 23000 // the tuner interface 6: the chunk size
	ignoreCost                       float32 = -1
)

// choice is how the machine's NCCL runs one collective.
type choice struct {
	algo, proto, channels int
	// forced: a tuner plugin moved NCCL's choice (its cost table or its
	// channels), even to what NCCL would have run (Model.ForcedFactor).
	forced bool
	// chunk is the chunk size it runs with and chunkNCCL the one NCCL
	// computed (bytes), where NCCL asks the plugin (2.30 and later): 0
	// otherwise.
	chunk, chunkNCCL int64
}

// ncclChunk is the chunk size the machine's NCCL computes for a choice:
// 512 KiB with Simple, 128 KiB with LL128, 32 KiB with LL (a model, not
// NCCL's formula).
func ncclChunk(c choice) int64 {
	switch c.proto {
	case protoLL:
		return 32 << 10
	case protoLL128:
		return 128 << 10
	}
	return 512 << 10
}

func (c choice) names() (string, string) { return algoNames[c.algo], protoNames[c.proto] }

// defaultChoice is the machine's NCCL's own rule, by each rank's count:
// LL on two channels up to 64 KiB (tree for allreduce), ring with Simple
// on four above.
func defaultChoice(k driver.OpKind, bytes int64) choice {
	if bytes <= 64<<10 {
		if k == driver.AllReduce {
			return choice{algo: algoTree, proto: protoLL, channels: 2}
		}
		return choice{algo: algoRing, proto: protoLL, channels: 2}
	}
	return choice{algo: algoRing, proto: protoSimple, channels: 4}
}

// loadTuner looks the tuner plugin up as NCCL does, once per machine: in
// the process, with NCCL_TUNER_PLUGIN=STATIC_PLUGIN, from NCCL 2.26.
func (d *Driver) loadTuner() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tunerTried {
		d.tunerTried = true
		v := 0
		if os.Getenv("NCCL_TUNER_PLUGIN") == "STATIC_PLUGIN" && d.opts.NCCLVersion >= tunerMinVersion {
			v = int(C.ft_load(boolInt(d.opts.NCCLVersion >= tunerChunkVersion)))
		}
		d.tuner, d.tunerChunks = v > 0, v >= 6
	}
	return d.tuner
}

// tunerInit introduces a new communicator rank to the plugin.
func (c *comm) tunerInit() {
	if !c.d.loadTuner() {
		return
	}
	var errc C.int
	ctx := C.ft_init(C.size_t(c.cl.n), 1, &errc)
	if errc == 0 {
		c.tunerCtx = ctx
	}
}

// tunerFinalize tells the plugin the communicator rank is gone.
func (c *comm) tunerFinalize() {
	if c.tunerCtx != nil {
		C.ft_destroy(c.tunerCtx)
		c.tunerCtx = nil
	}
}

// choose is the algorithm, protocol and channels of one collective: the
// machine's rule, as its cost table says (the rule's pair cheapest, every
// other pair the kind can run dearer), after the tuner plugin has seen the
// table. Allreduce runs tree or ring, the others ring, each with LL, LL128
// or Simple; alltoall, gather and scatter are sends and receives.
func (c *comm) choose(o driver.Op) choice {
	esz := int64(dtype.DType(o.DType).Size())
	ns, nr := counts(o, c.rank, c.cl.n)
	bytes := max(ns, nr) * esz // what NCCL tells a tuner
	def := defaultChoice(o.Kind, o.Count*esz)
	fn, asked := tunerFuncs[o.Kind]
	if c.tunerCtx == nil || !asked {
		return def
	}
	var table [nAlgos * nProtos]C.float
	for i := range table {
		table[i] = C.float(ignoreCost)
	}
	for a := range nAlgos {
		if a != algoRing && (a != algoTree || o.Kind != driver.AllReduce) {
			continue
		}
		for p := range nProtos {
			if p != protoLL128 || !c.d.opts.NoLL128 {
				table[a*nProtos+p] = 2
			}
		}
	}
	table[def.algo*nProtos+def.proto] = 1
	sent := table
	channels := C.int(0)
	if C.ft_ask(c.tunerCtx, C.int(fn), C.size_t(bytes), &table[0], &channels) != 0 {
		return def
	}
	best := def
	least := float32(1e30)
	for a := range nAlgos {
		for p := range nProtos {
			if v := float32(table[a*nProtos+p]); v >= 0 && v < least {
				least, best = v, choice{algo: a, proto: p, channels: def.channels}
			}
		}
	}
	if channels > 0 {
		best.channels = int(channels)
	}
	best.forced = channels > 0 || table != sent
	if c.d.tunerChunks {
		best.chunkNCCL = ncclChunk(best)
		best.chunk = int64(C.ft_chunk(c.tunerCtx, C.int(fn), C.size_t(bytes), C.int(best.algo), C.int(best.proto), C.int(best.channels), C.size_t(best.chunkNCCL)))
		best.forced = best.forced || best.chunk != best.chunkNCCL
	}
	return best
}

// boolInt is 1 for true.
func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// protocolTime is a transfer of base seconds at the link's rate with
// protocol p, where the model gives protocols their costs: LL moves half
// the data per line and adds nothing, LL128 loses 5% and adds 1 µs, Simple
// adds 4 µs at the full rate.
func (c *clock) protocolTime(p int, base float64) float64 {
	if !c.m.Protocols {
		return base
	}
	switch p {
	case protoLL:
		return base / 0.5
	case protoLL128:
		return 1e-6 + base/0.95
	}
	return 4e-6 + base
}

// upper is names in capitals, as NCCL's profiler writes them.
func upper(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToUpper(n)
	}
	return out
}
