// plugin.c: collbench's NCCL profiler plugin. It is linked into the
// collbench binary and exported from it (NCCL_PROFILER_PLUGIN=STATIC_PLUGIN
// makes NCCL look up ncclProfiler_v5 / ncclProfiler_v4 in the process).
// Events are recorded only while collbench arms the activation mask, for
// one untimed operation per row; the timed loops run with the mask at 0, so
// NCCL does not call the plugin at all then.
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "abi.h"
#include "plugin.h"

#define CBP_MAX_EVENTS (1 << 17)
#define CBP_MAX_CONTEXTS 4096

static cbp_event events[CBP_MAX_EVENTS];
static cbp_context contexts[CBP_MAX_CONTEXTS];
static atomic_int nevents, ncontexts, ninits, pending, dropped, loaded_version;
static atomic_int armed;
static int *nccl_mask; // NCCL's activation mask, read when an operation is enqueued

static uint64_t host_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void copy_str(char *dst, size_t n, const char *src) {
	if (src == NULL) {
		dst[0] = 0;
		return;
	}
	strncpy(dst, src, n - 1);
	dst[n - 1] = 0;
}

static cbp_event *new_event(int kind, int ctx, void *parent, int rank) {
	int i = atomic_fetch_add(&nevents, 1);
	if (i >= CBP_MAX_EVENTS) {
		atomic_fetch_sub(&nevents, 1);
		atomic_fetch_add(&dropped, 1);
		return NULL;
	}
	cbp_event *e = &events[i];
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->ctx = ctx;
	e->rank = rank;
	e->parent = -1;
	if (parent != NULL) {
		cbp_event *p = (cbp_event *)parent;
		if (p >= events && p < events + CBP_MAX_EVENTS) {
			e->parent = (int)(p - events);
		}
	}
	return e;
}

static cbp_result init_common(void **ctx, int *mask, const char *name, uint64_t hash, int nodes, int ranks, int rank, int version) {
	int i = atomic_fetch_add(&ncontexts, 1);
	atomic_fetch_add(&ninits, 1);
	atomic_store(&loaded_version, version);
	nccl_mask = mask;
	if (mask != NULL) {
		__atomic_store_n(mask, atomic_load(&armed), __ATOMIC_RELAXED);
	}
	if (i >= CBP_MAX_CONTEXTS) {
		atomic_fetch_sub(&ncontexts, 1);
		*ctx = NULL;
		return 0;
	}
	cbp_context *c = &contexts[i];
	c->comm_hash = hash;
	c->nodes = nodes;
	c->ranks = ranks;
	c->rank = rank;
	c->version = version;
	copy_str(c->name, sizeof(c->name), name);
	*ctx = c;
	return 0;
}

static int context_index(void *ctx) {
	cbp_context *c = (cbp_context *)ctx;
	if (c == NULL || c < contexts || c >= contexts + CBP_MAX_CONTEXTS) {
		return -1;
	}
	return (int)(c - contexts);
}

static cbp_result start_common(void *ctx, void **handle, uint64_t type, void *parent, int rank, const cbp_detail *d) {
	int ci = context_index(ctx);
	cbp_event *e = NULL;
	*handle = NULL;
	switch (type) {
	case CBP_COLL:
		if ((e = new_event(CBP_KIND_COLL, ci, parent, rank)) == NULL) {
			return 0;
		}
		e->seq = d->coll.seq;
		copy_str(e->fn, sizeof(e->fn), d->coll.func);
		copy_str(e->dtype, sizeof(e->dtype), d->coll.dtype);
		copy_str(e->algo, sizeof(e->algo), d->coll.algo);
		copy_str(e->proto, sizeof(e->proto), d->coll.proto);
		e->send = (uint64_t)(uintptr_t)d->coll.sendbuff;
		e->recv = (uint64_t)(uintptr_t)d->coll.recvbuff;
		e->count = d->coll.count;
		e->root = d->coll.root;
		e->channels = d->coll.nChannels;
		e->warps = d->coll.nWarps;
		e->host_start = host_ns(); // enqueued: before its kernel starts
		break;
	case CBP_P2P:
		if ((e = new_event(CBP_KIND_P2P, ci, parent, rank)) == NULL) {
			return 0;
		}
		copy_str(e->fn, sizeof(e->fn), d->p2p.func);
		copy_str(e->dtype, sizeof(e->dtype), d->p2p.dtype);
		e->send = e->recv = (uint64_t)(uintptr_t)d->p2p.buff;
		e->count = d->p2p.count;
		e->peer = d->p2p.peer;
		e->channels = d->p2p.nChannels;
		e->host_start = host_ns();
		break;
	case CBP_KERNEL_CH:
		if ((e = new_event(CBP_KIND_KERNEL_CH, ci, parent, rank)) == NULL) {
			return 0;
		}
		e->channel = d->kernelCh.channel;
		e->gpu_start = d->kernelCh.gpuTimer;
		// NCCL's proxy starts the event once it sees the kernel started:
		// after the start, on the host's clock.
		e->host_start = host_ns();
		atomic_fetch_add(&pending, 1);
		break;
	case CBP_PROXY_OP:
		if ((e = new_event(CBP_KIND_PROXY_OP, ci, parent, rank)) == NULL) {
			return 0;
		}
		e->channel = d->proxyOp.channel;
		e->peer = d->proxyOp.peer;
		e->steps = d->proxyOp.nSteps;
		e->chunk = d->proxyOp.chunkSize;
		e->is_send = d->proxyOp.isSend;
		e->host_start = host_ns();
		atomic_fetch_add(&pending, 1);
		break;
	case CBP_PROXY_STEP:
		if ((e = new_event(CBP_KIND_PROXY_STEP, ci, parent, rank)) == NULL) {
			return 0;
		}
		e->step = d->proxyStep.step;
		e->host_start = host_ns();
		atomic_fetch_add(&pending, 1);
		break;
	default:
		return 0; // groups, API events, proxy control: not recorded
	}
	*handle = e;
	return 0;
}

static cbp_result stop_event(void *handle) {
	cbp_event *e = (cbp_event *)handle;
	if (e == NULL || e < events || e >= events + CBP_MAX_EVENTS || e->stopped) {
		return 0;
	}
	switch (e->kind) {
	case CBP_KIND_KERNEL_CH:
		atomic_fetch_sub(&pending, 1);
		break;
	case CBP_KIND_PROXY_OP:
	case CBP_KIND_PROXY_STEP:
		e->host_stop = host_ns();
		atomic_fetch_sub(&pending, 1);
		break;
	}
	e->stopped = 1;
	return 0;
}

static cbp_result record_state(void *handle, int state, cbp_state_args *args) {
	cbp_event *e = (cbp_event *)handle;
	if (e == NULL || e < events || e >= events + CBP_MAX_EVENTS || args == NULL) {
		return 0;
	}
	if (e->kind == CBP_KIND_KERNEL_CH && state == CBP_STATE_KERNEL_CH_STOP) {
		e->gpu_stop = args->kernelCh.gpuTimer;
		e->host_stop = host_ns(); // seen stopped: after the stop
	} else if (e->kind == CBP_KIND_PROXY_STEP) {
		if (args->proxyStep.transSize > e->trans_size) {
			e->trans_size = args->proxyStep.transSize;
		}
		if (state == CBP_STATE_STEP_SEND_PEER_WAIT && e->peer_wait_at == 0) {
			e->peer_wait_at = host_ns();
		} else if (state == CBP_STATE_STEP_SEND_WAIT) {
			e->wire_at = host_ns();
		}
	}
	return 0;
}

static cbp_result finalize(void *ctx) {
	(void)ctx;
	return 0;
}

static cbp_result init_v4(void **ctx, int *mask, const char *name, uint64_t hash, int nodes, int ranks, int rank, cbp_logger log) {
	(void)log;
	return init_common(ctx, mask, name, hash, nodes, ranks, rank, 4);
}

static cbp_result init_v5(void **ctx, uint64_t id, int *mask, const char *name, int nodes, int ranks, int rank, cbp_logger log) {
	(void)log;
	return init_common(ctx, mask, name, id, nodes, ranks, rank, 5);
}

static cbp_result init_v6(void **ctx, uint64_t id, int *mask, const char *name, int nodes, int ranks, int rank, cbp_logger log) {
	(void)log;
	return init_common(ctx, mask, name, id, nodes, ranks, rank, 6);
}

static cbp_result start_v4(void *ctx, void **handle, cbp_descr_v4 *d) {
	return start_common(ctx, handle, d->type, d->parent, d->rank, &d->d);
}

static cbp_result start_v5(void *ctx, void **handle, cbp_descr_v5 *d) {
	return start_common(ctx, handle, d->type, d->parent, d->rank, &d->d);
}

cbp_plugin_v4 ncclProfiler_v4 = {"collbench", init_v4, start_v4, stop_event, record_state, finalize};
cbp_plugin_v5 ncclProfiler_v5 = {"collbench", init_v5, start_v5, stop_event, record_state, finalize};
cbp_plugin_v6 ncclProfiler_v6 = {"collbench", init_v6, start_v5, stop_event, record_state, finalize};

void cbp_arm(int mask) {
	atomic_store(&armed, mask);
	if (nccl_mask != NULL) {
		__atomic_store_n(nccl_mask, mask, __ATOMIC_RELAXED);
	}
}

int cbp_inits(void) { return atomic_load(&ninits); }
int cbp_version(void) { return atomic_load(&loaded_version); }
int cbp_pending(void) { return atomic_load(&pending); }
int cbp_dropped(void) { return atomic_load(&dropped); }

int cbp_events(void) {
	int n = atomic_load(&nevents);
	return n > CBP_MAX_EVENTS ? CBP_MAX_EVENTS : n;
}

int cbp_get_event(int i, cbp_event *out) {
	if (i < 0 || i >= cbp_events()) {
		return -1;
	}
	*out = events[i];
	return 0;
}

int cbp_get_context(int i, cbp_context *out) {
	if (i < 0 || i >= atomic_load(&ncontexts) || i >= CBP_MAX_CONTEXTS) {
		return -1;
	}
	*out = contexts[i];
	return 0;
}

void cbp_reset(void) {
	atomic_store(&nevents, 0);
	atomic_store(&dropped, 0);
}
