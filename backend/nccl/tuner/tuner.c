// tuner.c: collbench's NCCL tuner plugin. It is linked into the collbench
// binary and exported from it (NCCL_TUNER_PLUGIN=STATIC_PLUGIN makes NCCL
// look up ncclTunerPlugin_v4 in the process). It changes nothing unless
// collbench forces a choice for a collective type: then every operation of
// that type, on every communicator of the process, runs with that
// algorithm and protocol (and channel count, where given) whenever NCCL's
// cost table says it can. collbench tune forces a choice between
// operations, never while one is being enqueued.
#include <stdatomic.h>
#include <string.h>

#include "tuner.h"

#define IGNORE_COST (-1.0f)

typedef struct {
	atomic_int algo1, proto, channels; // the algorithm + 1; 0: nothing forced
	atomic_llong calls, applied, refused;
	atomic_int last_avail;
} forced_t;

static forced_t forced[CBT_FUNCS];
static atomic_int inits;
static int context_token; // the context NCCL hands back: the plugin keeps no state per communicator

static cbt_result init(size_t nRanks, size_t nNodes, cbt_logger log, void **context) {
	(void)nRanks;
	(void)nNodes;
	(void)log;
	atomic_fetch_add(&inits, 1);
	*context = &context_token;
	return 0;
}

static cbt_result get_coll_info(void *context, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                                int numAlgo, int numProto, int regBuff, int *nChannels) {
	(void)context;
	(void)nBytes;
	(void)numPipeOps;
	(void)regBuff;
	if (collType < 0 || collType >= CBT_FUNCS) {
		return 0;
	}
	forced_t *f = &forced[collType];
	int a = atomic_load(&f->algo1) - 1;
	if (a < 0) {
		return 0;
	}
	// NCCL passes its two-dimensional table as one block of numAlgo rows.
	float *table = (float *)collCostTable;
	int avail = 0;
	for (int i = 0; i < numAlgo && i < CBT_ALGOS; i++) {
		for (int j = 0; j < numProto && j < CBT_PROTOS; j++) {
			if (table[i * numProto + j] != IGNORE_COST) {
				avail |= 1 << (i * CBT_PROTOS + j);
			}
		}
	}
	atomic_store(&f->last_avail, avail);
	atomic_fetch_add(&f->calls, 1);
	int p = atomic_load(&f->proto);
	if (a >= numAlgo || p < 0 || p >= numProto || table[a * numProto + p] == IGNORE_COST) {
		atomic_fetch_add(&f->refused, 1);
		return 0;
	}
	for (int i = 0; i < numAlgo; i++) {
		for (int j = 0; j < numProto; j++) {
			float *c = &table[i * numProto + j];
			if (*c != IGNORE_COST && (i != a || j != p) && *c <= 0.0f) {
				*c = 1.0f; // nothing else may tie with the forced entry
			}
		}
	}
	table[a * numProto + p] = 0.0f;
	int ch = atomic_load(&f->channels);
	if (ch > 0) {
		*nChannels = ch;
	}
	atomic_fetch_add(&f->applied, 1);
	return 0;
}

static cbt_result destroy(void *context) {
	(void)context;
	return 0;
}

cbt_plugin_v4 ncclTunerPlugin_v4 = {"collbench", init, get_coll_info, destroy};

void cbt_force(int func, int algo, int proto, int channels) {
	if (func < 0 || func >= CBT_FUNCS) {
		return;
	}
	forced_t *f = &forced[func];
	atomic_store(&f->algo1, 0);
	atomic_store(&f->proto, proto);
	atomic_store(&f->channels, channels);
	atomic_store(&f->algo1, algo < 0 ? 0 : algo + 1);
}

int cbt_inits(void) { return atomic_load(&inits); }

void cbt_stats_of(int func, cbt_stats *out) {
	memset(out, 0, sizeof(*out));
	if (func < 0 || func >= CBT_FUNCS) {
		return;
	}
	forced_t *f = &forced[func];
	out->calls = atomic_load(&f->calls);
	out->applied = atomic_load(&f->applied);
	out->refused = atomic_load(&f->refused);
	out->last_avail = atomic_load(&f->last_avail);
}

void cbt_reset(int func) {
	if (func < 0 || func >= CBT_FUNCS) {
		return;
	}
	forced_t *f = &forced[func];
	atomic_store(&f->calls, 0);
	atomic_store(&f->applied, 0);
	atomic_store(&f->refused, 0);
	atomic_store(&f->last_avail, 0);
}
