// tuner.c: collbench's NCCL tuner plugin. It is linked into the collbench
// binary and exported from it (NCCL_TUNER_PLUGIN=STATIC_PLUGIN makes NCCL
// look up ncclTunerPlugin_v6, or _v4 before NCCL 2.30, in the process), and into collbench watch's
// plugin library, which an application loads. It changes nothing unless
// collbench forces a choice for a collective type, or was given a tuner
// file's lines: then every operation of that type (of a line's sizes and
// dimensions), on every communicator of the process, runs with that
// algorithm and protocol (and channel count, where given) whenever NCCL's
// cost table says it can, and, where NCCL offers interface version 6
// (2.30), with the chunk size given when it runs that algorithm and
// protocol. A forced choice comes first. collbench tune forces a choice
// between operations, never while one is being enqueued.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tuner.h"

#define IGNORE_COST (-1.0f)

typedef struct {
	atomic_int algo1, proto, channels; // the algorithm + 1; 0: nothing forced
	atomic_llong chunk;                // bytes; 0: NCCL's; below 0: NCCL's times -chunk/1000
	atomic_llong calls, applied, refused;
	atomic_int last_avail;
	atomic_llong chunk_calls, chunk_nccl, chunk_used, chunk_applied;
} forced_t;

static forced_t forced[CBT_FUNCS];
static atomic_int inits;

// The tuner file's lines, set once (cbt_set_lines): nlines is published
// after the lines are in place.
static cbt_line *lines;
static atomic_int nlines;
static atomic_int lines_set;
static void (*_Atomic init_hook)(void);

// A communicator's dimensions, which a line may name.
typedef struct {
	long long nranks, nnodes;
} comm_t;

static comm_t unknown_comm = {-2, -2}; // where no context could be made: only lines for any dimensions match

static cbt_result init(size_t nRanks, size_t nNodes, cbt_logger log, void **context) {
	(void)log;
	void (*hook)(void) = atomic_load(&init_hook);
	if (hook) {
		hook();
	}
	atomic_fetch_add(&inits, 1);
	comm_t *c = malloc(sizeof(*c));
	if (!c) {
		*context = &unknown_comm;
		return 0;
	}
	c->nranks = (long long)nRanks;
	c->nnodes = (long long)nNodes;
	*context = c;
	return 0;
}

// apply makes entry (a, p) of NCCL's table the cheapest, with ch channels
// where ch > 0; it returns 0 where the table says the pair cannot run.
static int apply(float *table, int numAlgo, int numProto, int a, int p, int ch, int *nChannels) {
	if (a < 0 || a >= numAlgo || p < 0 || p >= numProto || table[a * numProto + p] == IGNORE_COST) {
		return 0;
	}
	for (int i = 0; i < numAlgo; i++) {
		for (int j = 0; j < numProto; j++) {
			float *c = &table[i * numProto + j];
			if (*c != IGNORE_COST && (i != a || j != p) && *c <= 0.0f) {
				*c = 1.0f; // nothing else may tie with the chosen entry
			}
		}
	}
	table[a * numProto + p] = 0.0f;
	if (ch > 0) {
		*nChannels = ch;
	}
	return 1;
}

// line_for is the first line that covers the operation, as NCCL's example
// tuner plugin picks it (pipeops and regbuff -2: not known, any line's).
static const cbt_line *line_for(const comm_t *c, int collType, size_t nBytes, int numPipeOps, int regBuff) {
	int n = atomic_load(&nlines);
	for (int i = 0; i < n; i++) {
		const cbt_line *l = &lines[i];
		if (l->func == collType && (long long)nBytes >= l->min_bytes && (long long)nBytes <= l->max_bytes &&
		    (l->nranks == -1 || l->nranks == c->nranks) && (l->nnodes == -1 || l->nnodes == c->nnodes) &&
		    (l->pipeops == -1 || numPipeOps == -2 || l->pipeops == numPipeOps) &&
		    (l->regbuff == -1 || regBuff == -2 || l->regbuff == regBuff)) {
			return l;
		}
	}
	return NULL;
}

// from_lines applies the line that covers the operation.
static void from_lines(const comm_t *c, int collType, size_t nBytes, int numPipeOps, int regBuff, float *table, int numAlgo,
                       int numProto, int *nChannels) {
	const cbt_line *l = line_for(c, collType, nBytes, numPipeOps, regBuff);
	if (l) {
		apply(table, numAlgo, numProto, l->algo, l->proto, l->channels, nChannels);
	}
}

static cbt_result get_coll_info(void *context, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                                int numAlgo, int numProto, int regBuff, int *nChannels) {
	if (collType < 0 || collType >= CBT_FUNCS) {
		return 0;
	}
	// NCCL passes its two-dimensional table as one block of numAlgo rows.
	float *table = (float *)collCostTable;
	forced_t *f = &forced[collType];
	int a = atomic_load(&f->algo1) - 1;
	if (a < 0) {
		if (context) {
			from_lines((const comm_t *)context, collType, nBytes, numPipeOps, regBuff, table, numAlgo, numProto, nChannels);
		}
		return 0;
	}
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
	if (!apply(table, numAlgo, numProto, a, atomic_load(&f->proto), atomic_load(&f->channels), nChannels)) {
		atomic_fetch_add(&f->refused, 1);
		return 0;
	}
	atomic_fetch_add(&f->applied, 1);
	return 0;
}

static cbt_result destroy(void *context) {
	if (context && context != &unknown_comm) {
		free(context);
	}
	return 0;
}

// get_chunk_size (interface 6) sets the chunk of an operation whose
// algorithm and protocol are chosen: the forced chunk where the forced
// pair is what runs, else the chunk of the line that covers it where the
// line's pair runs; NCCL's own otherwise (it clamps what it is given to
// its buffers).
static cbt_result get_chunk_size(void *context, int collType, size_t nBytes, int algo, int proto, int nChannels,
                                 size_t *chunkSize) {
	(void)nChannels;
	if (collType < 0 || collType >= CBT_FUNCS || !chunkSize) {
		return 0;
	}
	forced_t *f = &forced[collType];
	int a = atomic_load(&f->algo1) - 1;
	if (a >= 0) {
		atomic_fetch_add(&f->chunk_calls, 1);
		atomic_store(&f->chunk_nccl, (long long)*chunkSize);
		long long ch = atomic_load(&f->chunk);
		if (ch < 0) { // a factor of NCCL's own, in thousandths
			ch = (long long)((double)*chunkSize * (double)(-ch) / 1000.0);
			ch = ch < CBT_MIN_CHUNK ? CBT_MIN_CHUNK : ch > CBT_MAX_CHUNK ? CBT_MAX_CHUNK : ch;
		}
		if (ch > 0 && a == algo && atomic_load(&f->proto) == proto) {
			*chunkSize = (size_t)ch;
			atomic_fetch_add(&f->chunk_applied, 1);
		}
		atomic_store(&f->chunk_used, (long long)*chunkSize);
		return 0;
	}
	if (context) {
		const cbt_line *l = line_for((const comm_t *)context, collType, nBytes, -2, -2);
		if (l && l->chunk > 0 && l->algo == algo && l->proto == proto) {
			*chunkSize = (size_t)l->chunk;
		}
	}
	return 0;
}

static cbt_result init_v6(void **context, uint64_t commId, size_t nRanks, size_t nNodes, cbt_logger log, void *nvl,
                          void *constants) {
	(void)commId, (void)nvl, (void)constants;
	return init(nRanks, nNodes, log, context);
}

cbt_plugin_v4 ncclTunerPlugin_v4 = {"collbench", init, get_coll_info, destroy};
cbt_plugin_v6 ncclTunerPlugin_v6 = {"collbench", init_v6, get_coll_info, destroy, get_chunk_size};

void cbt_force(int func, int algo, int proto, int channels, int64_t chunk) {
	if (func < 0 || func >= CBT_FUNCS) {
		return;
	}
	forced_t *f = &forced[func];
	atomic_store(&f->algo1, 0);
	atomic_store(&f->proto, proto);
	atomic_store(&f->channels, channels);
	atomic_store(&f->chunk, chunk);
	atomic_store(&f->algo1, algo < 0 ? 0 : algo + 1);
}

int cbt_inits(void) { return atomic_load(&inits); }

void cbt_set_lines(const cbt_line *ls, int n) {
	if (n <= 0 || atomic_exchange(&lines_set, 1)) {
		return;
	}
	cbt_line *copy = malloc(sizeof(*copy) * (size_t)n);
	if (!copy) {
		return;
	}
	memcpy(copy, ls, sizeof(*copy) * (size_t)n);
	lines = copy;
	atomic_store(&nlines, n);
}

void cbt_set_init_hook(void (*hook)(void)) { atomic_store(&init_hook, hook); }

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
	out->chunk_calls = atomic_load(&f->chunk_calls);
	out->chunk_nccl = atomic_load(&f->chunk_nccl);
	out->chunk_used = atomic_load(&f->chunk_used);
	out->chunk_applied = atomic_load(&f->chunk_applied);
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
	atomic_store(&f->chunk_calls, 0);
	atomic_store(&f->chunk_nccl, 0);
	atomic_store(&f->chunk_used, 0);
	atomic_store(&f->chunk_applied, 0);
}
