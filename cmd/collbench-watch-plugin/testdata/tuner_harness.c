// tuner_harness.c plays NCCL for the tuner the watch plugin's library
// carries: it loads the library as NCCL loads NCCL_TUNER_PLUGIN (dlopen,
// then ncclTunerPlugin_v4), opens a communicator of RANKS ranks on NODES
// nodes, and for each line of standard input "FUNC BYTES PIPEOPS REGBUFF"
// (FUNC by ncclFunc_t: 0 broadcast ... 4 allreduce) asks the tuner with a
// cost table in which every pair can run but NVLS and NVLS tree, NCCL's
// own choice (ring/simple) the cheapest, and 16 channels. It prints the
// cheapest pair after the call and the channel count: "ring simple 16".
//
//   tuner_harness LIBRARY RANKS NODES
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "tuner.h"

static const char *algos[] = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
static const char *protos[] = {"ll", "ll128", "simple"};

static void quiet(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
	(void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: tuner_harness LIBRARY RANKS NODES\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "tuner_harness: %s\n", dlerror());
		return 2;
	}
	cbt_plugin_v4 *t = dlsym(lib, "ncclTunerPlugin_v4");
	if (!t) {
		fprintf(stderr, "tuner_harness: no ncclTunerPlugin_v4 in %s\n", argv[1]);
		return 2;
	}
	void *ctx = NULL;
	if (t->init((size_t)atol(argv[2]), (size_t)atol(argv[3]), quiet, &ctx) != 0) {
		fprintf(stderr, "tuner_harness: init failed\n");
		return 2;
	}
	int fn, pipe, reg;
	long long bytes;
	while (scanf("%d %lld %d %d", &fn, &bytes, &pipe, &reg) == 4) {
		float table[CBT_ALGOS][CBT_PROTOS];
		for (int a = 0; a < CBT_ALGOS; a++) {
			for (int p = 0; p < CBT_PROTOS; p++) {
				table[a][p] = (a == 4 || a == 5) ? -1.0f : 10.0f + a * CBT_PROTOS + p;
			}
		}
		table[1][2] = 5.0f; // NCCL's own: ring/simple
		float *rows[CBT_ALGOS];
		for (int a = 0; a < CBT_ALGOS; a++) {
			rows[a] = table[a];
		}
		int ch = 16;
		// NCCL hands its table as one block of rows, as the tuner reads it.
		t->getCollInfo(ctx, fn, (size_t)bytes, pipe, (float **)table, CBT_ALGOS, CBT_PROTOS, reg, &ch);
		(void)rows;
		int ba = -1, bp = -1;
		for (int a = 0; a < CBT_ALGOS; a++) {
			for (int p = 0; p < CBT_PROTOS; p++) {
				if (table[a][p] >= 0 && (ba < 0 || table[a][p] < table[ba][bp])) {
					ba = a, bp = p;
				}
			}
		}
		printf("%s %s %d\n", algos[ba], protos[bp], ch);
	}
	t->destroy(ctx);
	return 0;
}
