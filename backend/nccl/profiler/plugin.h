// plugin.h: what collbench's profiler plugin records, read by profiler.go.
#ifndef COLLBENCH_PROFILER_PLUGIN_H
#define COLLBENCH_PROFILER_PLUGIN_H

#include <stdint.h>

enum { CBP_KIND_COLL = 1, CBP_KIND_P2P, CBP_KIND_KERNEL_CH, CBP_KIND_PROXY_OP, CBP_KIND_PROXY_STEP };

// cbp_event is one recorded event. Handles given to NCCL point at these.
typedef struct {
	int kind;
	int ctx;    // the communicator's context, an index into the contexts
	int parent; // the parent event's index, -1 for none
	int rank;
	int stopped;
	// collective and point-to-point operations
	char fn[24], dtype[16], algo[24], proto[16];
	uint64_t count;
	int root, peer, channels, warps;
	uint64_t send, recv; // buffer addresses (point-to-point: both the buffer)
	uint64_t seq;
	// kernel channels: the GPU's global timer (ns)
	int channel;
	uint64_t gpu_start, gpu_stop;
	// proxy operations and steps: the host's monotonic clock (ns)
	int is_send, steps, chunk, step;
	uint64_t host_start, host_stop, trans_size;
	// a send step: when its data was ready and it waited for the peer's
	// buffer, and when it went on the wire (0: not reported)
	uint64_t peer_wait_at, wire_at;
} cbp_event;

typedef struct {
	uint64_t comm_hash;
	int nodes, ranks, rank, version;
	char name[64];
} cbp_context;

// The plugin's exported state, for collbench (not for NCCL).
void cbp_arm(int mask);
int cbp_inits(void);     // how many times NCCL called init
int cbp_version(void);   // the interface version NCCL loaded (4, 5), 0 if none
int cbp_pending(void);   // events started and not stopped
int cbp_events(void);    // events recorded since the last drain
int cbp_dropped(void);   // events lost because the pool was full
int cbp_get_event(int i, cbp_event *out);
int cbp_get_context(int i, cbp_context *out);
void cbp_reset(void);

#endif
