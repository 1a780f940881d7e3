// plugin.c: the NCCL side of collbench's watch plugin. NCCL calls it on
// the application's threads and its proxy thread; it only writes each
// operation's times into a ring per communicator, never blocks, never
// allocates after init and never calls into Go. The Go side (main.go)
// collects finished operations from the rings and sends their summaries.
#include <dlfcn.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_cgo_export.h"
#include "abi.h"
#include "watchplugin.h"

enum { KIND_OP = 0x7761, KIND_CH = 0x7763, KIND_SEND = 0x7773, KIND_STEP = 0x7774 };
enum { FREE = 0, OPEN, DONE };

typedef struct cbw_op cbw_op;

// cbw_ch is the handle NCCL gets for every kernel channel of one operation.
typedef struct {
	int kind;
	cbw_op *op;
} cbw_ch;

typedef struct cbw_send cbw_send;

// cbw_step is the handle of one network step of a send: when it was posted
// to the network (0: not yet), and how many bytes it carried.
typedef struct {
	int kind;
	cbw_send *send;
	atomic_int busy;
	_Atomic int64_t wire_at;
	_Atomic int64_t size;
} cbw_step;

// cbw_send is the handle of one proxy operation that sends: one peer, one
// channel, of a recording operation.
struct cbw_send {
	int kind;
	cbw_op *op;
	int peer, channel;
	_Atomic int64_t bytes, wire_ns;
	cbw_step steps[CBW_STEPS];
};

struct cbw_op {
	int kind;
	atomic_int state;
	uint64_t seq;
	const char *func; // NCCL's name of the collective (its static string), or NULL
	const char *dtype; // NCCL's name of its element type (its static string), or NULL
	int64_t count;     // the count NCCL was called with
	int64_t issue;
	int channels; // as NCCL announced them; 0 when it did not say
	atomic_int started, stopped, coll_stopped;
	_Atomic int64_t gpu_start, gpu_stop, seen_minus_gpu;
	cbw_ch ch;
	// Every CBW_LINK_EVERY-th operation records its network sends: the
	// proxy operations that send, up to CBW_LINKS of them, in sends (its
	// slot's block of the context's pool; NULL in the other slots). It is
	// finished only once every proxy operation that started has stopped.
	int records;
	atomic_int nsends, proxy_started, proxy_stopped;
	cbw_send *sends;
};

struct cbw_ctx {
	uint64_t hash;
	int rank, ranks, nodes;
	char bus[32];
	// wire_tx and wire_rx bound the bytes this communicator's operations
	// put on the GPU's links each way (wire_bound), counted as NCCL is
	// handed them, every operation, recorded or not.
	_Atomic int64_t wire_tx, wire_rx;
	atomic_ullong head;
	atomic_int dropped;
	cbw_op ops[CBW_SLOTS];
	// pool holds the sends of the slots that record them, allocated
	// apart so that a job without network transport never touches it.
	cbw_send *pool;
};

static cbw_ctx *contexts[CBW_MAX_CONTEXTS];
static pid_t me; // a proxy operation of another process has a parent that is not ours
static atomic_int ncontexts, nrefused;
static atomic_int enabled = -1; // -1: not decided yet

static int64_t host_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + (int64_t)ts.tv_nsec;
}

static void atomic_min64(_Atomic int64_t *p, int64_t v) {
	int64_t cur = atomic_load(p);
	while (v < cur && !atomic_compare_exchange_weak(p, &cur, v)) {
	}
}

static void atomic_max64(_Atomic int64_t *p, int64_t v) {
	int64_t cur = atomic_load(p);
	while (v > cur && !atomic_compare_exchange_weak(p, &cur, v)) {
	}
}

// gpu_bus_id writes the PCI bus id of the calling thread's current CUDA
// device (NCCL creates a communicator on its device's thread), or "" when
// the driver cannot say. The driver's functions are looked up at run time.
static void gpu_bus_id(char *out, int n) {
	typedef int (*get_device_fn)(int *);
	typedef int (*bus_id_fn)(char *, int, int);
	out[0] = 0;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL) {
		return;
	}
	get_device_fn get_device = (get_device_fn)dlsym(h, "cuCtxGetDevice");
	bus_id_fn bus_id = (bus_id_fn)dlsym(h, "cuDeviceGetPCIBusId");
	int dev = -1;
	if (get_device != NULL && bus_id != NULL && get_device(&dev) == 0 && bus_id(out, n, dev) != 0) {
		out[0] = 0;
	}
	dlclose(h);
}

void cbw_enable(int on) { atomic_store(&enabled, on); }

int cbw_enabled(void) { return atomic_load(&enabled); }

static cbp_result init_common(void **ctx, int *mask, uint64_t hash, int nodes, int ranks, int rank) {
	*ctx = NULL;
	if (atomic_load(&enabled) == -1) {
		cbwConfigure(); // the Go side reads the environment once, then enables or not
	}
	if (atomic_load(&enabled) != 1) {
		if (mask != NULL) {
			*mask = 0; // nothing asked of NCCL: the plugin does nothing
		}
		return 0;
	}
	int i = atomic_fetch_add(&ncontexts, 1);
	cbw_ctx *c = NULL;
	if (i < CBW_MAX_CONTEXTS) {
		c = calloc(1, sizeof(cbw_ctx));
		if (c != NULL && (c->pool = calloc(CBW_SLOTS / CBW_LINK_EVERY * CBW_LINKS, sizeof(cbw_send))) == NULL) {
			free(c);
			c = NULL;
		}
	}
	if (c == NULL) {
		atomic_fetch_add(&nrefused, 1);
		if (i >= CBW_MAX_CONTEXTS) {
			atomic_fetch_sub(&ncontexts, 1);
		}
		if (mask != NULL) {
			*mask = 0;
		}
		return 0;
	}
	me = getpid();
	c->hash = hash;
	c->rank = rank;
	c->ranks = ranks;
	c->nodes = nodes;
	gpu_bus_id(c->bus, sizeof(c->bus));
	for (int s = 0; s < CBW_SLOTS; s++) {
		c->ops[s].kind = KIND_OP;
		c->ops[s].ch.kind = KIND_CH;
		c->ops[s].ch.op = &c->ops[s];
		// Operation at+1 sits in slot at % CBW_SLOTS: the ones that record
		// (a number that is a multiple of CBW_LINK_EVERY) in the slots
		// one short of a multiple.
		c->ops[s].sends = (s + 1) % CBW_LINK_EVERY == 0 ? &c->pool[s / CBW_LINK_EVERY * CBW_LINKS] : NULL;
	}
	// Published last: the collector reads contexts[i] once it is set.
	__atomic_store_n(&contexts[i], c, __ATOMIC_RELEASE);
	*ctx = c;
	if (mask != NULL) {
		*mask = CBP_COLL | CBP_P2P | CBP_KERNEL_CH | CBP_PROXY_OP | CBP_PROXY_STEP;
	}
	return 0;
}

// type_size is the size in bytes of NCCL's element type by its name
// (ncclFloat32: 4, ncclBfloat16: 2, ncclFloat8e4m3: 1): the bits its name
// gives, 8 bytes where it gives none (a bound, not a guess).
static int64_t type_size(const char *dtype) {
	if (dtype == NULL) {
		return 8;
	}
	for (const char *p = dtype; *p != 0; p++) {
		if (*p >= '0' && *p <= '9') {
			int bits = atoi(p);
			return bits >= 8 ? bits / 8 : 8;
		}
	}
	return 8;
}

// proto_bound is b as protocol proto puts it on the wire: LL sends a flag
// with every 4 bytes of data (twice the data), LL128 8 bytes of 128
// (16/15), Simple the data; twice where NCCL did not say.
static int64_t proto_bound(const char *proto, int64_t b) {
	if (proto != NULL && (proto[0] == 'S' || proto[0] == 's')) {
		return b;
	}
	if (proto != NULL && proto[0] != 0 && proto[1] != 0 && proto[2] == '1') {
		return b + b / 15 + 1;
	}
	return 2 * b;
}

// wire_bound is at most what one rank of ranks puts on its links each
// way in a collective: the ring's share of the data (2(n-1)/n of it in an
// allreduce, n-1 blocks in an allgather or reduce-scatter, whose count is
// one rank's block, the data in a broadcast or reduce), twice the data in
// an allreduce by another algorithm (a tree or chain sends it up and
// down), n times twice the data in a collective of another name, by the
// protocol's overhead.
static int64_t wire_bound(const cbp_detail *d, int ranks) {
	int64_t n = ranks > 1 ? ranks : 1, s = (int64_t)d->coll.count * type_size(d->coll.dtype), b;
	const char *fn = d->coll.func == NULL ? "" : d->coll.func, *algo = d->coll.algo;
	if (strcmp(fn, "AllReduce") == 0) {
		b = algo != NULL && (algo[0] == 'R' || algo[0] == 'r') ? 2 * (n - 1) * (s / n + 1) : 2 * s;
	} else if (strcmp(fn, "AllGather") == 0 || strcmp(fn, "ReduceScatter") == 0) {
		b = (n - 1) * s;
	} else if (strcmp(fn, "Broadcast") == 0 || strcmp(fn, "Reduce") == 0) {
		b = s;
	} else {
		b = 2 * n * s;
	}
	return proto_bound(d->coll.proto, b);
}

// account adds what an operation NCCL is handed puts on the GPU's links
// to its communicator's bound: a collective's both ways, a send's out, a
// receive's in (NCCL sends up to 16 KiB by LL, twice the data).
static void account(cbw_ctx *c, uint64_t type, const cbp_detail *d) {
	if (type == CBP_COLL) {
		int64_t b = wire_bound(d, c->ranks);
		atomic_fetch_add(&c->wire_tx, b);
		atomic_fetch_add(&c->wire_rx, b);
		return;
	}
	int64_t b = (int64_t)d->p2p.count * type_size(d->p2p.dtype);
	b = b <= 16384 ? 2 * b : b;
	if (d->p2p.func != NULL && d->p2p.func[0] == 'R') {
		atomic_fetch_add(&c->wire_rx, b);
	} else {
		atomic_fetch_add(&c->wire_tx, b);
	}
}

static void finish(cbw_op *op) {
	int open = OPEN;
	atomic_compare_exchange_strong(&op->state, &open, DONE);
}

// maybe_done marks op finished once every channel NCCL announced has
// stopped, or, where it announced none, once the operation has stopped
// and every channel that started has.
static void maybe_done(cbw_op *op) {
	int started = atomic_load(&op->started), stopped = atomic_load(&op->stopped);
	if (stopped == 0) {
		return;
	}
	if (atomic_load(&op->proxy_stopped) < atomic_load(&op->proxy_started)) {
		return; // a send still on the wire: its proxy operation's stop finishes op
	}
	if ((op->channels > 0 && stopped >= op->channels) || (atomic_load(&op->coll_stopped) && stopped >= started)) {
		finish(op);
	}
}

// start_send returns the handle of a proxy operation of a recording
// operation that sends, or NULL (not recorded: a receive, another
// process's, an operation that does not record, or more sends than kept).
static void *start_send(void *parent, const cbp_detail *d) {
	if (parent == NULL || d->proxyOp.pid != me || !d->proxyOp.isSend || *(int *)parent != KIND_OP) {
		return NULL;
	}
	cbw_op *op = (cbw_op *)parent;
	if (!op->records) {
		return NULL;
	}
	// Counted first, so the operation is not finished (and taken) while
	// its send is being set up.
	atomic_fetch_add(&op->proxy_started, 1);
	int i = atomic_load(&op->state) == OPEN ? atomic_fetch_add(&op->nsends, 1) : CBW_LINKS;
	if (i >= CBW_LINKS) {
		atomic_fetch_add(&op->proxy_stopped, 1);
		maybe_done(op);
		return NULL;
	}
	cbw_send *snd = &op->sends[i];
	snd->kind = KIND_SEND;
	snd->op = op;
	snd->peer = d->proxyOp.peer;
	snd->channel = d->proxyOp.channel;
	atomic_store(&snd->bytes, 0);
	atomic_store(&snd->wire_ns, 0);
	for (int k = 0; k < CBW_STEPS; k++) {
		snd->steps[k].kind = KIND_STEP;
		snd->steps[k].send = snd;
		atomic_store(&snd->steps[k].busy, 0);
	}
	return snd;
}

static cbp_result start_common(void *ctx, void **handle, uint64_t type, void *parent, const cbp_detail *d) {
	*handle = NULL;
	cbw_ctx *c = (cbw_ctx *)ctx;
	if (c == NULL) {
		return 0;
	}
	if (type == CBP_COLL || type == CBP_P2P) {
		account(c, type, d);
	}
	if (type == CBP_COLL) {
		uint64_t at = atomic_fetch_add(&c->head, 1);
		cbw_op *op = &c->ops[at % CBW_SLOTS];
		if (atomic_load(&op->state) != FREE) {
			atomic_fetch_add(&c->dropped, 1); // the collector is behind: this one is not recorded
			return 0;
		}
		// The operation's number is the communicator's own count of
		// collectives: every rank calls them in one order. NCCL's
		// seqNumber counts each function's calls apart (the first
		// allreduce and the first allgather are both 0), so it does not
		// tell one operation from another.
		op->seq = at + 1;
		op->func = d->coll.func;
		op->dtype = d->coll.dtype;
		op->count = (int64_t)d->coll.count;
		op->channels = d->coll.nChannels;
		atomic_store(&op->started, 0);
		atomic_store(&op->stopped, 0);
		atomic_store(&op->coll_stopped, 0);
		atomic_store(&op->gpu_start, INT64_MAX);
		atomic_store(&op->gpu_stop, INT64_MIN);
		atomic_store(&op->seen_minus_gpu, INT64_MAX);
		// The operations whose number is a multiple of CBW_LINK_EVERY: the
		// same on every rank, and among those a sampled job sends
		// (COLLBENCH_WATCH_EVERY) where that is a multiple too.
		op->records = op->seq % CBW_LINK_EVERY == 0 && op->sends != NULL; // CBW_SLOTS is a multiple of CBW_LINK_EVERY
		atomic_store(&op->nsends, 0);
		atomic_store(&op->proxy_started, 0);
		atomic_store(&op->proxy_stopped, 0);
		op->issue = host_ns(); // handed to NCCL: before its kernel starts
		atomic_store(&op->state, OPEN);
		*handle = op;
		return 0;
	}
	if (type == CBP_KERNEL_CH && parent != NULL && ((cbw_op *)parent)->kind == KIND_OP) {
		cbw_op *op = (cbw_op *)parent;
		if (atomic_load(&op->state) != OPEN) {
			return 0;
		}
		// NCCL's proxy reports the start once it has seen it: after it.
		int64_t seen = host_ns(), g = (int64_t)d->kernelCh.gpuTimer;
		atomic_min64(&op->gpu_start, g);
		atomic_min64(&op->seen_minus_gpu, seen - g);
		atomic_fetch_add(&op->started, 1);
		*handle = &op->ch;
		return 0;
	}
	if (type == CBP_PROXY_OP) {
		*handle = start_send(parent, d);
		return 0;
	}
	if (type == CBP_PROXY_STEP && parent != NULL && *(int *)parent == KIND_SEND) {
		cbw_send *snd = (cbw_send *)parent;
		cbw_step *st = &snd->steps[(unsigned)d->proxyStep.step % CBW_STEPS];
		int idle = 0;
		if (!atomic_compare_exchange_strong(&st->busy, &idle, 1)) {
			return 0; // more steps in flight than kept: this one is not timed
		}
		atomic_store(&st->wire_at, 0);
		atomic_store(&st->size, 0);
		*handle = st;
	}
	return 0;
}

static cbp_result stop_event(void *handle) {
	if (handle == NULL) {
		return 0;
	}
	int kind = *(int *)handle;
	if (kind == KIND_OP) {
		cbw_op *op = (cbw_op *)handle;
		atomic_store(&op->coll_stopped, 1);
		maybe_done(op);
	} else if (kind == KIND_CH) {
		cbw_op *op = ((cbw_ch *)handle)->op;
		atomic_fetch_add(&op->stopped, 1);
		maybe_done(op);
	} else if (kind == KIND_STEP) {
		cbw_step *st = (cbw_step *)handle;
		int64_t at = atomic_load(&st->wire_at);
		if (at != 0) {
			atomic_fetch_add(&st->send->bytes, atomic_load(&st->size));
			atomic_fetch_add(&st->send->wire_ns, host_ns() - at);
		}
		atomic_store(&st->busy, 0);
	} else if (kind == KIND_SEND) {
		cbw_op *op = ((cbw_send *)handle)->op;
		atomic_fetch_add(&op->proxy_stopped, 1);
		maybe_done(op);
	}
	return 0;
}

static cbp_result record_state(void *handle, int state, cbp_state_args *args) {
	if (handle != NULL && args != NULL && *(int *)handle == KIND_STEP) {
		// Posted to the network: its time on the wire starts.
		cbw_step *st = (cbw_step *)handle;
		if (args->proxyStep.transSize > (size_t)atomic_load(&st->size)) {
			atomic_store(&st->size, (int64_t)args->proxyStep.transSize);
		}
		if (state == CBP_STATE_STEP_SEND_WAIT && atomic_load(&st->wire_at) == 0) {
			atomic_store(&st->wire_at, host_ns());
		}
		return 0;
	}
	if (handle == NULL || args == NULL || *(int *)handle != KIND_CH || state != CBP_STATE_KERNEL_CH_STOP) {
		return 0;
	}
	cbw_op *op = ((cbw_ch *)handle)->op;
	int64_t seen = host_ns(), g = (int64_t)args->kernelCh.gpuTimer;
	atomic_max64(&op->gpu_stop, g);
	atomic_min64(&op->seen_minus_gpu, seen - g);
	return 0;
}

static cbp_result finalize(void *ctx) {
	// The context stays allocated: the collector may still be reading it,
	// and NCCL makes few communicators. What has finished goes out now: a
	// process often ends right after its communicators.
	if (ctx != NULL && atomic_load(&enabled) == 1) {
		cbwFinalize();
	}
	return 0;
}

static cbp_result init_v4(void **ctx, int *mask, const char *name, uint64_t hash, int nodes, int ranks, int rank, cbp_logger log) {
	(void)name, (void)log;
	cbw_set_interface(4);
	return init_common(ctx, mask, hash, nodes, ranks, rank);
}

static cbp_result init_v5(void **ctx, uint64_t id, int *mask, const char *name, int nodes, int ranks, int rank, cbp_logger log) {
	(void)name, (void)log;
	cbw_set_interface(5);
	return init_common(ctx, mask, id, nodes, ranks, rank);
}

static cbp_result init_v6(void **ctx, uint64_t id, int *mask, const char *name, int nodes, int ranks, int rank, cbp_logger log) {
	(void)name, (void)log;
	cbw_set_interface(6);
	return init_common(ctx, mask, id, nodes, ranks, rank);
}

static cbp_result start_v4(void *ctx, void **handle, cbp_descr_v4 *d) { return start_common(ctx, handle, d->type, d->parent, &d->d); }

static cbp_result start_v5(void *ctx, void **handle, cbp_descr_v5 *d) { return start_common(ctx, handle, d->type, d->parent, &d->d); }

// The profiler interfaces of NCCL 2.23 to 2.25 (versions 1 to 3) pass no
// communicator to init, so the plugin cannot follow one. It answers them
// only to say so: with its environment set, one line on the job's stderr,
// and no event asked of NCCL; without it, nothing.
typedef struct {
	const char *name;
	cbp_result (*init)(void **ctx, int *mask);
	cbp_result (*startEvent)(void *ctx, void **handle, void *d);
	cbp_result (*stopEvent)(void *handle);
	cbp_result (*recordEventState)(void *handle, int state, void *args);
	cbp_result (*finalize)(void *ctx);
} cbw_plugin_old;

static atomic_int told_old;

static void init_old(void **ctx, int *mask, int version) {
	*ctx = NULL;
	if (mask != NULL) {
		*mask = 0;
	}
	const char *addr = getenv("COLLBENCH_WATCH");
	if (addr != NULL && addr[0] != 0 && atomic_exchange(&told_old, 1) == 0) {
		fprintf(stderr, "collbench watch plugin: this NCCL offers the profiler interface version %d; the plugin needs version 4, 5 or 6 (NCCL 2.26 or later), so nothing is sent; the job runs on without it\n", version);
	}
}

static cbp_result init_v1(void **ctx, int *mask) {
	init_old(ctx, mask, 1);
	return 0;
}

static cbp_result init_v2(void **ctx, int *mask) {
	init_old(ctx, mask, 2);
	return 0;
}

static cbp_result init_v3(void **ctx, int *mask) {
	init_old(ctx, mask, 3);
	return 0;
}


static cbp_result start_old(void *ctx, void **handle, void *d) {
	(void)ctx, (void)d;
	*handle = NULL;
	return 0;
}

static cbp_result record_old(void *handle, int state, void *args) {
	(void)handle, (void)state, (void)args;
	return 0;
}

static cbp_result stop_old(void *handle) {
	(void)handle;
	return 0;
}

cbw_plugin_old ncclProfiler_v1 = {"collbench-watch", init_v1, start_old, stop_old, record_old, finalize};
cbw_plugin_old ncclProfiler_v2 = {"collbench-watch", init_v2, start_old, stop_old, record_old, finalize};
cbw_plugin_old ncclProfiler_v3 = {"collbench-watch", init_v3, start_old, stop_old, record_old, finalize};
cbp_plugin_v4 ncclProfiler_v4 = {"collbench-watch", init_v4, start_v4, stop_event, record_state, finalize};
cbp_plugin_v5 ncclProfiler_v5 = {"collbench-watch", init_v5, start_v5, stop_event, record_state, finalize};
cbp_plugin_v6 ncclProfiler_v6 = {"collbench-watch", init_v6, start_v5, stop_event, record_state, finalize};

int cbw_contexts(void) {
	int n = atomic_load(&ncontexts);
	return n > CBW_MAX_CONTEXTS ? CBW_MAX_CONTEXTS : n;
}

int cbw_refused(void) { return atomic_load(&nrefused); }

int cbw_context(int i, cbw_info *out) {
	if (i < 0 || i >= CBW_MAX_CONTEXTS) {
		return -1;
	}
	cbw_ctx *c = __atomic_load_n(&contexts[i], __ATOMIC_ACQUIRE);
	if (c == NULL) {
		return -1;
	}
	out->hash = c->hash;
	out->rank = c->rank;
	out->ranks = c->ranks;
	out->dropped = atomic_load(&c->dropped);
	out->nodes = c->nodes;
	out->wire_tx = atomic_load(&c->wire_tx);
	out->wire_rx = atomic_load(&c->wire_rx);
	memcpy(out->bus, c->bus, sizeof(out->bus));
	return 0;
}

int cbw_take(int i, int64_t older_than, cbw_done *out, int max) {
	cbw_ctx *c = (i >= 0 && i < CBW_MAX_CONTEXTS) ? __atomic_load_n(&contexts[i], __ATOMIC_ACQUIRE) : NULL;
	if (c == NULL) {
		return 0;
	}
	int n = 0;
	for (int s = 0; s < CBW_SLOTS && n < max; s++) {
		cbw_op *op = &c->ops[s];
		int st = atomic_load(&op->state);
		if (st == DONE) {
			cbw_done *o = &out[n++];
			o->seq = op->seq;
			o->func[0] = 0;
			if (op->func != NULL) {
				strncpy(o->func, op->func, sizeof(o->func) - 1);
				o->func[sizeof(o->func) - 1] = 0;
			}
			o->dtype[0] = 0;
			if (op->dtype != NULL) {
				strncpy(o->dtype, op->dtype, sizeof(o->dtype) - 1);
				o->dtype[sizeof(o->dtype) - 1] = 0;
			}
			o->count = op->count;
			o->issue = op->issue;
			o->gpu_start = atomic_load(&op->gpu_start);
			o->gpu_stop = atomic_load(&op->gpu_stop);
			o->seen_minus_gpu = atomic_load(&op->seen_minus_gpu);
			o->nsent = 0;
			int n_sends = atomic_load(&op->nsends);
			for (int k = 0; k < n_sends && k < CBW_LINKS; k++) {
				cbw_send *snd = &op->sends[k];
				o->sent[o->nsent++] = (cbw_sent){snd->peer, atomic_load(&snd->bytes), atomic_load(&snd->wire_ns)};
			}
			atomic_store(&op->state, FREE);
		} else if (st == OPEN && op->issue < older_than) {
			// Its channels were never all reported: given up, counted.
			atomic_fetch_add(&c->dropped, 1);
			atomic_store(&op->state, FREE);
		}
	}
	return n;
}

int64_t cbw_now(void) { return host_ns(); }
