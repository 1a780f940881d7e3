// ncclside.h: the NCCL side of NCCL's profiler plugin interface, versions
// 4 and 5: how NCCL sees a plugin and calls it. Declared here on their own
// (not shared with collbench's plugins' abi.h), so a plugin is called as
// NCCL calls it: by the fake machine (profiler.go) and by the watch
// plugin's test stand-in for NCCL (cmd/collbench-watch-plugin/testdata).
#ifndef COLLBENCH_FAKEGPU_NCCLSIDE_H
#define COLLBENCH_FAKEGPU_NCCLSIDE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int (*fp_logger)(void);
typedef struct {
	uint64_t seqNumber; const char *func; const void *sendBuff; void *recvBuff; size_t count; int root;
	const char *datatype; uint8_t nChannels; uint8_t nWarps; const char *algo; const char *proto; void *parentGroup;
} fp_coll;
typedef struct { const char *func; void *buff; const char *datatype; size_t count; int peer; uint8_t nChannels; void *parentGroup; } fp_p2p;
typedef struct { uint8_t channelId; uint64_t pTimer; } fp_kernel;
typedef struct { pid_t pid; uint8_t channelId; int peer; int nSteps; int chunkSize; int isSend; } fp_proxy_op;
typedef struct { int step; } fp_proxy_step;
typedef union { fp_coll coll; fp_p2p p2p; fp_kernel kernelCh; fp_proxy_op proxyOp; fp_proxy_step proxyStep; } fp_union;
typedef struct { uint8_t type; void *parentObj; int rank; fp_union u; } fp_descr4;
typedef struct { uint64_t type; void *parentObj; int rank; fp_union u; } fp_descr5;
typedef union { struct { size_t transSize; } proxyStep; struct { uint64_t pTimer; } kernelCh; } fp_state;
typedef struct {
	const char *name;
	int (*init)(void **, int *, const char *, uint64_t, int, int, int, void *);
	int (*startEvent)(void *, void **, fp_descr4 *);
	int (*stopEvent)(void *);
	int (*recordEventState)(void *, int, fp_state *);
	int (*finalize)(void *);
} fp_v4;
typedef struct {
	const char *name;
	int (*init)(void **, uint64_t, int *, const char *, int, int, int, void *);
	int (*startEvent)(void *, void **, fp_descr5 *);
	int (*stopEvent)(void *);
	int (*recordEventState)(void *, int, fp_state *);
	int (*finalize)(void *);
} fp_v5;

#endif
