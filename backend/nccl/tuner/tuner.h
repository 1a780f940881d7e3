// tuner.h: collbench's NCCL tuner plugin (interface version 4, NCCL 2.24
// and later), declared from the interface's documented layout, and the
// state collbench reads and writes (tuner.go).
#ifndef COLLBENCH_TUNER_PLUGIN_H
#define COLLBENCH_TUNER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

typedef int cbt_result; // ncclResult_t; 0 is success
typedef void (*cbt_logger)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

// NCCL's interface, version 4: the plugin object NCCL looks up by the
// symbol ncclTunerPlugin_v4.
typedef struct {
	const char *name;
	cbt_result (*init)(size_t nRanks, size_t nNodes, cbt_logger log, void **context);
	// getCollInfo gets NCCL's cost table for one operation, a row of
	// numProto floats per algorithm (-1.0: the pair cannot run it); the
	// plugin may lower one entry and set the channel count.
	cbt_result (*getCollInfo)(void *context, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
	                          int numAlgo, int numProto, int regBuff, int *nChannels);
	cbt_result (*destroy)(void *context);
} cbt_plugin_v4;

// Sizes of NCCL's tables as of interface version 4 and later.
enum { CBT_FUNCS = 16, CBT_ALGOS = 7, CBT_PROTOS = 3 };

// What collbench reads back per collective type.
typedef struct {
	int64_t calls;   // getCollInfo calls while a choice was forced
	int64_t applied; // ... where the forced entry could run and was chosen
	int64_t refused; // ... where NCCL's table marked it as unable to run
	int last_avail;  // bit a*CBT_PROTOS+p: the last table's runnable pairs
} cbt_stats;

// A tuner file's line by NCCL's indices (cbt_set_lines): -1 in nnodes,
// nranks, pipeops and regbuff matches any; channels <= 0 keeps NCCL's own.
typedef struct {
	int func;
	int64_t min_bytes, max_bytes;
	int algo, proto, channels, nnodes, nranks, pipeops, regbuff;
} cbt_line;

void cbt_force(int func, int algo, int proto, int channels); // algo < 0: none
void cbt_set_lines(const cbt_line *lines, int n);            // once: later calls change nothing
void cbt_set_init_hook(void (*hook)(void));                   // run at each communicator's init, before its first question
int cbt_inits(void);
void cbt_stats_of(int func, cbt_stats *out);
void cbt_reset(int func);

#endif
