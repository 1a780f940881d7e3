// abi.h: collbench's own declarations of NCCL's profiler plugin interface,
// versions 4 (NCCL 2.27), 5 (NCCL 2.28 and later) and 6 (NCCL 2.30), written from the
// interface's documented layout. Only the members collbench reads are named;
// the offsets are checked below, so a change of layout fails the build.
#ifndef COLLBENCH_PROFILER_ABI_H
#define COLLBENCH_PROFILER_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int cbp_result; // ncclResult_t; 0 is success
typedef void (*cbp_logger)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

// Event types (the descriptor's type, and the bits of the activation mask).
enum {
	CBP_GROUP = 1 << 0,
	CBP_COLL = 1 << 1,
	CBP_P2P = 1 << 2,
	CBP_PROXY_OP = 1 << 3,
	CBP_PROXY_STEP = 1 << 4,
	CBP_PROXY_CTRL = 1 << 5,
	CBP_KERNEL_CH = 1 << 6,
	CBP_NET_PLUGIN = 1 << 7,
};

// Event states passed to recordEventState that collbench reads.
enum {
	CBP_STATE_STEP_SEND_GPU_WAIT = 8,
	CBP_STATE_STEP_SEND_WAIT = 9,
	CBP_STATE_STEP_RECV_WAIT = 10,
	CBP_STATE_STEP_RECV_FLUSH_WAIT = 11,
	CBP_STATE_STEP_RECV_GPU_WAIT = 12,
	CBP_STATE_STEP_SEND_PEER_WAIT = 20,
	CBP_STATE_KERNEL_CH_STOP = 22,
};

// The event-specific part of a descriptor. In both versions it starts at
// byte 24 (after the type, the parent object and the rank).
typedef union {
	struct {
		uint64_t seq;
		const char *func;
		const void *sendbuff;
		void *recvbuff;
		size_t count;
		int root;
		const char *dtype;
		uint8_t nChannels;
		uint8_t nWarps;
		const char *algo;
		const char *proto;
	} coll;
	struct {
		const char *func;
		void *buff;
		const char *dtype;
		size_t count;
		int peer;
		uint8_t nChannels;
	} p2p;
	struct {
		pid_t pid;
		uint8_t channel;
		int peer;
		int nSteps;
		int chunkSize;
		int isSend;
	} proxyOp;
	struct {
		int step;
	} proxyStep;
	struct {
		uint8_t channel;
		uint64_t gpuTimer; // start, from the GPU's global timer (ns)
	} kernelCh;
	char size_[120];
} cbp_detail;

// Version 4 descriptor: an 8-bit type.
typedef struct {
	uint8_t type;
	void *parent;
	int rank;
	cbp_detail d;
} cbp_descr_v4;

// Version 5 descriptor: a 64-bit type.
typedef struct {
	uint64_t type;
	void *parent;
	int rank;
	cbp_detail d;
} cbp_descr_v5;

// State arguments (the same in versions 4, 5 and 6).
typedef union {
	struct {
		size_t transSize;
	} proxyStep;
	struct {
		uint64_t gpuTimer; // stop, from the GPU's global timer (ns)
	} kernelCh;
	char size_[16];
} cbp_state_args;

typedef struct {
	const char *name;
	cbp_result (*init)(void **ctx, int *mask, const char *commName, uint64_t commHash, int nNodes, int nRanks, int rank, cbp_logger log);
	cbp_result (*startEvent)(void *ctx, void **handle, cbp_descr_v4 *d);
	cbp_result (*stopEvent)(void *handle);
	cbp_result (*recordEventState)(void *handle, int state, cbp_state_args *args);
	cbp_result (*finalize)(void *ctx);
} cbp_plugin_v4;

typedef struct {
	const char *name;
	cbp_result (*init)(void **ctx, uint64_t commId, int *mask, const char *commName, int nNodes, int nRanks, int rank, cbp_logger log);
	cbp_result (*startEvent)(void *ctx, void **handle, cbp_descr_v5 *d);
	cbp_result (*stopEvent)(void *handle);
	cbp_result (*recordEventState)(void *handle, int state, cbp_state_args *args);
	cbp_result (*finalize)(void *ctx);
} cbp_plugin_v5;

// Version 6 (NCCL 2.30) is version 5's layout: the same functions, the
// same descriptor with the same members at the same offsets, to which it
// adds events of collectives run by the copy engines (types 1 << 12 to
// 1 << 14, with descriptor members of their own). collbench asks for none
// of those (its activation mask), so NCCL hands it version 5's events.
typedef cbp_plugin_v5 cbp_plugin_v6;

_Static_assert(offsetof(cbp_descr_v4, d) == 24, "v4 descriptor detail at 24");
_Static_assert(offsetof(cbp_descr_v5, d) == 24, "v5 descriptor detail at 24");
_Static_assert(offsetof(cbp_detail, coll.count) == 32, "coll.count");
_Static_assert(offsetof(cbp_detail, coll.dtype) == 48, "coll.datatype");
_Static_assert(offsetof(cbp_detail, coll.nChannels) == 56, "coll.nChannels");
_Static_assert(offsetof(cbp_detail, coll.algo) == 64, "coll.algo");
_Static_assert(offsetof(cbp_detail, coll.proto) == 72, "coll.proto");
_Static_assert(offsetof(cbp_detail, p2p.peer) == 32, "p2p.peer");
_Static_assert(offsetof(cbp_detail, p2p.nChannels) == 36, "p2p.nChannels");
_Static_assert(offsetof(cbp_detail, proxyOp.peer) == 8, "proxyOp.peer");
_Static_assert(offsetof(cbp_detail, proxyOp.isSend) == 20, "proxyOp.isSend");
_Static_assert(offsetof(cbp_detail, kernelCh.gpuTimer) == 8, "kernelCh.pTimer");

#endif
