// tuner_harness.c plays NCCL for the tuner the watch plugin's library
// carries: it loads the library as NCCL loads NCCL_TUNER_PLUGIN (dlopen,
// then ncclTunerPlugin_v4), opens a communicator of RANKS ranks on NODES
// nodes, and for each line of standard input "FUNC BYTES PIPEOPS REGBUFF"
// (FUNC by ncclFunc_t: 0 broadcast ... 4 allreduce) asks the tuner with a
// cost table in which every pair can run but NVLS and NVLS tree, NCCL's
// own choice (ring/simple) the cheapest, and 16 channels. It prints the
// cheapest pair after the call and the channel count: "ring simple 16".
// With VERSION 6 it loads ncclTunerPlugin_v6, as NCCL 2.30 does, and then
// asks the chunk size for the pair chosen, NCCL's being 524288 bytes, and
// prints it after the channels.
//
//   tuner_harness LIBRARY RANKS NODES [VERSION]
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
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: tuner_harness LIBRARY RANKS NODES [VERSION]\n");
		return 2;
	}
	int v6 = argc == 5 && atoi(argv[4]) == 6;
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "tuner_harness: %s\n", dlerror());
		return 2;
	}
	cbt_plugin_v4 *t = dlsym(lib, "ncclTunerPlugin_v4");
	cbt_plugin_v6 *t6 = v6 ? dlsym(lib, "ncclTunerPlugin_v6") : NULL;
	if (!t || (v6 && !t6)) {
		fprintf(stderr, "tuner_harness: no ncclTunerPlugin_v%d in %s\n", v6 ? 6 : 4, argv[1]);
		return 2;
	}
	void *ctx = NULL;
	int rc = v6 ? t6->init(&ctx, 42, (size_t)atol(argv[2]), (size_t)atol(argv[3]), quiet, NULL, NULL)
	            : t->init((size_t)atol(argv[2]), (size_t)atol(argv[3]), quiet, &ctx);
	if (rc != 0) {
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
		if (v6) {
			size_t chunk = 524288;
			t6->getChunkSize(ctx, fn, (size_t)bytes, ba, bp, ch, &chunk);
			printf("%s %s %d %zu\n", algos[ba], protos[bp], ch, chunk);
		} else {
			printf("%s %s %d\n", algos[ba], protos[bp], ch);
		}
	}
	if (v6) {
		t6->finalize(ctx);
		return 0;
	}
	t->destroy(ctx);
	return 0;
}
