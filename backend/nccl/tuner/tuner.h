// tuner.h: collbench's NCCL tuner plugin (interface version 4, NCCL 2.24
// and later, and version 6, NCCL 2.30 and later, which adds the chunk
// size), declared from the interface's documented layout, and the state
// collbench reads and writes (tuner.go).
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

// NCCL's interface, version 6: init also gets the communicator's id and
// two structures collbench does not read (the NVLink domain, the tuning
// constants), and getChunkSize may change the chunk NCCL computed for an
// operation whose algorithm, protocol and channels are chosen.
typedef struct {
	const char *name;
	cbt_result (*init)(void **context, uint64_t commId, size_t nRanks, size_t nNodes, cbt_logger log, void *nvlDomainInfo,
	                   void *constants);
	cbt_result (*getCollInfo)(void *context, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
	                          int numAlgo, int numProto, int regBuff, int *nChannels);
	cbt_result (*finalize)(void *context);
	cbt_result (*getChunkSize)(void *context, int collType, size_t nBytes, int algo, int proto, int nChannels,
	                           size_t *chunkSize);
} cbt_plugin_v6;

// Sizes of NCCL's tables as of interface version 4 and later.
enum { CBT_FUNCS = 16, CBT_ALGOS = 7, CBT_PROTOS = 3 };

// The bounds of a chunk collbench gives (tuner.go: MinChunk, MaxChunk).
#define CBT_MIN_CHUNK (4LL << 10)
#define CBT_MAX_CHUNK (16LL << 20)

// What collbench reads back per collective type.
typedef struct {
	int64_t calls;   // getCollInfo calls while a choice was forced
	int64_t applied; // ... where the forced entry could run and was chosen
	int64_t refused; // ... where NCCL's table marked it as unable to run
	int last_avail;  // bit a*CBT_PROTOS+p: the last table's runnable pairs
	// getChunkSize calls (interface 6) while a choice was forced, the
	// chunk NCCL computed at the last of them and the chunk it was given,
	// and the calls where a forced chunk replaced NCCL's.
	int64_t chunk_calls, chunk_nccl, chunk_used, chunk_applied;
} cbt_stats;

// A tuner file's line by NCCL's indices (cbt_set_lines): -1 in nnodes,
// nranks, pipeops and regbuff matches any; channels <= 0 keeps NCCL's own,
// chunk <= 0 NCCL's chunk size.
typedef struct {
	int func;
	int64_t min_bytes, max_bytes;
	int algo, proto, channels, nnodes, nranks, pipeops, regbuff;
	int64_t chunk;
} cbt_line;

// cbt_force: algo < 0 forces nothing; chunk 0 keeps NCCL's chunk, above 0
// is bytes, below 0 NCCL's chunk times -chunk/1000 (within the bounds).
void cbt_force(int func, int algo, int proto, int channels, int64_t chunk);
void cbt_set_lines(const cbt_line *lines, int n);            // once: later calls change nothing
void cbt_set_init_hook(void (*hook)(void));                   // run at each communicator's init, before its first question
int cbt_inits(void);
void cbt_stats_of(int func, cbt_stats *out);
void cbt_reset(int func);

#endif
