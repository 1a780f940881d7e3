// harness.c plays NCCL for the watch plugin's test: one process is one
// rank of one communicator. It loads the plugin as NCCL does (dlopen of
// NCCL_PROFILER_PLUGIN, then ncclProfiler_v6, _v5 or _v4) and runs ops
// collectives on a timeline every rank shares (an allreduce, an allgather
// and a broadcast in turn, each numbered on its own as NCCL numbers
// them): operation i is issued at
// base + i * period on CLOCK_MONOTONIC, its kernel starts HARNESS_QUEUE_US
// later (30 by default: the compute queued ahead of it on the stream),
// plus LATE_US on the late rank, from operation LATE_FROM on (a negative
// LATE_US issues the operation that much later instead), and runs for
// 20 us once every rank it waits for has started: every rank waits for
// every other in an allreduce and an allgather, for the root (rank 0) in
// a broadcast, so a late rank's peers end with it, as on a GPU. The GPU's
// timer is the host's clock minus skew ms. Each
// channel's start and stop are reported a little after they happen, from
// a second thread, as NCCL's proxy does (so the issuing thread never waits
// for a kernel). It prints the activation mask the plugin asked for.
//
// With HARNESS_NET_BYTES=B each operation also sends the next rank B
// bytes over "the network" on each of its 2 channels, one proxy operation
// and one step each, as NCCL's proxy reports them: the step is posted
// (SEND_PEER_WAIT, then SEND_WAIT) and stops after B / HARNESS_NET_BPS
// seconds, or B / HARNESS_SLOW_BPS on rank HARNESS_SLOW_SEND. The proxy
// spends that time only on steps the plugin times (it returned a handle),
// so a slow link does not push the rest of the timeline behind.
//
// With HARNESS_LATE_FUNC=F the late rank is late only in the operations
// of function F (AllReduce: as a GPU that another program slows starts
// late the collective that follows its compute, and the ones queued behind
// it on time).
//
// With HARNESS_STEP=1 the three operations of a step are handed to NCCL
// together at the step's start (every 3 periods), as a training job's
// host does, and run back to back on the stream: the allreduce after the
// queued compute, the allgather after the allreduce's end, the broadcast
// after the allgather's. Every operation then starts long after its
// issue, as on a GPU; a late rank's GPU starts LATE_FUNC's operation late
// (a GPU that another program time-slices holds the collective after the
// compute back) and a negative LATE_US issues the whole step late.
//
// With HARNESS_FORK_AT=N it forks at operation N, as a training job's data
// loader does: the child works for 200 ms (allocating and freeing memory)
// and ends with _exit, or with exit when HARNESS_FORK_EXIT=exit; the rank
// goes on issuing, waits at most 5 s for the child at its end, prints
// "child exit S" and returns 3 unless the child ended with 0.
//
// With HARNESS_CUDA and HARNESS_NVML naming the test's stand-ins of the
// CUDA driver and NVML (cuda_standin.c, nvml_standin.c), the rank's GPU has
// a bus id of its own and NVLink counters: each operation moves over them
// what a ring moves by LL (twice the data: 2(n-1)/n of the buffer in an
// allreduce, n-1 blocks in an allgather, the buffer in a broadcast) times
// HARNESS_COUNTED (1.1: the hardware counts a little more), of
// HARNESS_COUNT elements (1024 floats); with HARNESS_SENDS=B each operation
// also sends B bytes to the next rank and receives B from the one before
// (NCCL's point-to-point events). HARNESS_P2P=FROM:TO:BPS:ON:OFF plants
// another program copying BPS bytes a second from rank FROM's GPU to rank
// TO's, from operation ON's issue to operation OFF's. HARNESS_NODES=N
// has NCCL say the communicator spans N hosts (1 by default).
//
// VERSION is the profiler interface NCCL offers: 5 or 4, or 1 to 3 as an
// older NCCL (the plugin then asks for nothing).
//
//   harness PLUGIN VERSION RANK RANKS BASE_NS PERIOD_US OPS SKEW_MS LATE_RANK LATE_US LATE_FROM
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ncclside.h" // backend/nccl/fakegpu: the NCCL side of the interface

static int version;
static void *plugin;

// The job's plan, the same in every rank's process, so that each can
// tell when its peers' kernels start and so when its own ends.
#define WORK_NS 20000
static const char *funcs[3] = {"AllReduce", "AllGather", "Broadcast"};
static int late_rank, late_from, step_mode;
static int64_t base, period, late, queue_ns = 30000;
static const char *late_func;

// late_at says whether rank q is late in operation i.
static int late_at(int q, int i) {
	return q == late_rank && i >= late_from && (late_func == NULL || strcmp(late_func, funcs[i % 3]) == 0);
}

// issue_at is when rank q hands NCCL operation i.
static int64_t issue_at(int q, int i) {
	if (step_mode) {
		int64_t t = base + (int64_t)(i / 3) * 3 * period + (i % 3) * 2000;
		return t + ((q == late_rank && i >= late_from && late < 0) ? -late : 0);
	}
	return base + i * period + ((late_at(q, i) && late < 0) ? -late : 0);
}

// timeline plans operation i on every rank: when each kernel starts (s)
// and ends (e), from each rank's end of the operation before (prev, used
// in step mode and then set to e).
static void timeline(int i, int ranks, int64_t *prev, int64_t *s, int64_t *e) {
	int64_t last = 0;
	for (int q = 0; q < ranks; q++) {
		int64_t t = issue_at(q, i) + ((!step_mode || i % 3 == 0) ? queue_ns : 2000);
		if (step_mode && i % 3 != 0 && prev[q] + 2000 > t) t = prev[q] + 2000;
		if (late_at(q, i) && late > 0) t += late;
		s[q] = t;
		if (t > last) last = t;
	}
	for (int q = 0; q < ranks; q++) {
		if (strcmp(funcs[i % 3], "Broadcast") == 0) e[q] = (s[q] > s[0] ? s[q] : s[0]) + WORK_NS;
		else e[q] = last + WORK_NS;
		prev[q] = e[q];
	}
}
// fp_old is the profiler interface of NCCL 2.23 to 2.25 (versions 1 to
// 3): init has no communicator.
typedef struct {
	const char *name;
	int (*init)(void **ctx, int *mask);
	int (*startEvent)(void *ctx, void **handle, void *d);
	int (*stopEvent)(void *handle);
	int (*recordEventState)(void *handle, int state, void *args);
	int (*finalize)(void *ctx);
} fp_old;
static int64_t net_bytes;
static double net_bps = 1e9;

// The NVML stand-in's hands, where it is loaded.
static void (*nvlink_add)(int64_t tx, int64_t rx);
static double counted = 1.1;
static int64_t count = 1024, sends;

// standins loads the CUDA and NVML stand-ins the environment names, tells
// the first the rank, and plants the copy of HARNESS_P2P in the second.
static int standins(int rank) {
	const char *cuda = getenv("HARNESS_CUDA"), *nvml = getenv("HARNESS_NVML");
	if (cuda != NULL) {
		void *h = dlopen(cuda, RTLD_NOW | RTLD_GLOBAL);
		void (*set)(int) = h ? (void (*)(int))dlsym(h, "standin_cuda_rank") : NULL;
		if (set == NULL) {
			fprintf(stderr, "harness: %s\n", dlerror());
			return -1;
		}
		set(rank);
	}
	if (nvml == NULL) {
		return 0;
	}
	void *h = dlopen(nvml, RTLD_NOW | RTLD_GLOBAL);
	void (*plant)(double, double, int64_t, int64_t) = h ? (void (*)(double, double, int64_t, int64_t))dlsym(h, "standin_nvlink_plant") : NULL;
	nvlink_add = h ? (void (*)(int64_t, int64_t))dlsym(h, "standin_nvlink_add") : NULL;
	if (plant == NULL || nvlink_add == NULL) {
		fprintf(stderr, "harness: %s\n", dlerror());
		return -1;
	}
	if (getenv("HARNESS_COUNTED")) counted = atof(getenv("HARNESS_COUNTED"));
	if (getenv("HARNESS_COUNT")) count = atoll(getenv("HARNESS_COUNT"));
	if (getenv("HARNESS_SENDS")) sends = atoll(getenv("HARNESS_SENDS"));
	int from, to, on, off;
	double bps;
	if (getenv("HARNESS_P2P") && sscanf(getenv("HARNESS_P2P"), "%d:%d:%lf:%d:%d", &from, &to, &bps, &on, &off) == 5) {
		if (rank == from) plant(bps, 0, base + on * period, base + off * period);
		if (rank == to) plant(0, bps, base + on * period, base + off * period);
	}
	return 0;
}

// moved is what operation i of ranks puts on each of a rank's NVLink
// directions as the stand-in's hardware counts it.
static int64_t moved(int i, int ranks) {
	double s = (double)count * 4, b = s;
	if (i % 3 == 0) b = 2.0 * (ranks - 1) / ranks * s;
	else if (i % 3 == 1) b = (ranks - 1) * s;
	return (int64_t)(2 * b * counted);
}

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void sleep_until(int64_t t) {
	struct timespec ts = {t / 1000000000ll, t % 1000000000ll};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
	}
}

static void *start(void *ctx, int type, void *parent, int rank, fp_union *u) {
	void *h = NULL;
	if (version >= 5) { // version 6 is version 5's layout
		fp_descr5 d;
		memset(&d, 0, sizeof d);
		d.type = type, d.parentObj = parent, d.rank = rank, d.u = *u;
		((fp_v5 *)plugin)->startEvent(ctx, &h, &d);
	} else {
		fp_descr4 d;
		memset(&d, 0, sizeof d);
		d.type = (uint8_t)type, d.parentObj = parent, d.rank = rank, d.u = *u;
		((fp_v4 *)plugin)->startEvent(ctx, &h, &d);
	}
	return h;
}

static void stop(void *h) {
	if (h != NULL) ((fp_v5 *)plugin)->stopEvent(h); // same place in both versions
}

static void record(void *h, int state, fp_state *a) {
	if (h != NULL) ((fp_v5 *)plugin)->recordEventState(h, state, a);
}

// The proxy: a queue of kernels to report, in issue order.
#define QLEN 4096
static struct kernel { void *ctx, *coll; int rank, ranks; int64_t start, stop, skew; } queue[QLEN];
static int qhead, qtail, qdone;
static void send_over_network(const struct kernel *k);
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcv = PTHREAD_COND_INITIALIZER;

static void *proxy(void *arg) {
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&qmu);
		while (qhead == qtail && !qdone) pthread_cond_wait(&qcv, &qmu);
		if (qhead == qtail && qdone) {
			pthread_mutex_unlock(&qmu);
			return NULL;
		}
		struct kernel k = queue[qhead % QLEN];
		qhead++;
		pthread_mutex_unlock(&qmu);
		void *ch[2];
		sleep_until(k.start + 5000);
		for (int c = 0; c < 2; c++) {
			fp_union u;
			memset(&u, 0, sizeof u);
			u.kernelCh.channelId = (uint8_t)c, u.kernelCh.pTimer = (uint64_t)(k.start + c * 1000 - k.skew);
			ch[c] = start(k.ctx, 1 << 6, k.coll, k.rank, &u);
		}
		if (net_bytes > 0) {
			send_over_network(&k);
		}
		sleep_until(k.stop + 5000);
		for (int c = 0; c < 2; c++) {
			fp_state a;
			memset(&a, 0, sizeof a);
			a.kernelCh.pTimer = (uint64_t)(k.stop - k.skew);
			record(ch[c], 22, &a);
			stop(ch[c]);
		}
		stop(k.coll);
	}
}

// send_over_network reports one operation's network sends to the next
// rank: a proxy operation and a step per channel.
static void send_over_network(const struct kernel *k) {
	for (int c = 0; c < 2; c++) {
		fp_union u;
		memset(&u, 0, sizeof u);
		u.proxyOp.pid = getpid(), u.proxyOp.channelId = (uint8_t)c, u.proxyOp.peer = (k->rank + 1) % k->ranks;
		u.proxyOp.nSteps = 1, u.proxyOp.chunkSize = (int)net_bytes, u.proxyOp.isSend = 1;
		void *op = start(k->ctx, 1 << 3, k->coll, k->rank, &u);
		memset(&u, 0, sizeof u);
		u.proxyStep.step = 0;
		void *st = start(k->ctx, 1 << 4, op, k->rank, &u);
		fp_state a;
		memset(&a, 0, sizeof a);
		a.proxyStep.transSize = (size_t)net_bytes;
		record(st, 20, &a); // waiting for the peer: not on the wire yet
		record(st, 9, &a);  // posted to the network
		if (st != NULL) {
			sleep_until(now_ns() + (int64_t)((double)net_bytes / net_bps * 1e9));
		}
		stop(st);
		stop(op);
	}
}

int main(int argc, char **argv) {
	if (argc != 12) {
		fprintf(stderr, "usage: harness PLUGIN VERSION RANK RANKS BASE_NS PERIOD_US OPS SKEW_MS LATE_RANK LATE_US LATE_FROM\n");
		return 2;
	}
	int want = atoi(argv[2]), rank = atoi(argv[3]), ranks = atoi(argv[4]);
	int64_t skew = atoll(argv[8]) * 1000000;
	int ops = atoi(argv[7]);
	base = atoll(argv[5]), period = atoll(argv[6]) * 1000;
	late_rank = atoi(argv[9]), late_from = atoi(argv[11]), late = atoll(argv[10]) * 1000;
	if (getenv("HARNESS_QUEUE_US")) queue_ns = atoll(getenv("HARNESS_QUEUE_US")) * 1000;
	step_mode = getenv("HARNESS_STEP") != NULL;
	if (ranks > 64) {
		fprintf(stderr, "harness: at most 64 ranks\n");
		return 2;
	}
	if (getenv("HARNESS_NET_BYTES")) net_bytes = atoll(getenv("HARNESS_NET_BYTES"));
	if (getenv("HARNESS_NET_BPS")) net_bps = atof(getenv("HARNESS_NET_BPS"));
	if (getenv("HARNESS_SLOW_SEND") && atoi(getenv("HARNESS_SLOW_SEND")) == rank && getenv("HARNESS_SLOW_BPS")) net_bps = atof(getenv("HARNESS_SLOW_BPS"));
	// HARNESS_NCCL: a library to load first, as the application loads NCCL
	// (the plugin names the NCCL it finds loaded).
	if (getenv("HARNESS_NCCL") && dlopen(getenv("HARNESS_NCCL"), RTLD_NOW | RTLD_LOCAL) == NULL) {
		fprintf(stderr, "harness: %s\n", dlerror());
		return 1;
	}
	if (standins(rank) != 0) {
		return 1;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "harness: %s\n", dlerror());
		return 1;
	}
	char sym[32];
	snprintf(sym, sizeof sym, "ncclProfiler_v%d", want);
	if (want >= 6 && (plugin = dlsym(lib, "ncclProfiler_v6")) != NULL) version = 6;
	else if (want == 5 && (plugin = dlsym(lib, "ncclProfiler_v5")) != NULL) version = 5;
	else if (want == 4 && (plugin = dlsym(lib, "ncclProfiler_v4")) != NULL) version = 4;
	else if (want >= 1 && want <= 3 && (plugin = dlsym(lib, sym)) != NULL) version = want; // an older NCCL
	else {
		fprintf(stderr, "harness: no profiler interface in %s\n", argv[1]);
		return 1;
	}
	void *ctx = NULL;
	int mask = -1;
	const uint64_t hash = 0x5eed0000c0ffeeull;
	int nodes = getenv("HARNESS_NODES") ? atoi(getenv("HARNESS_NODES")) : 1; // the hosts NCCL says the communicator spans
	if (version >= 5) ((fp_v5 *)plugin)->init(&ctx, hash, &mask, "test", nodes, ranks, rank, NULL);
	else if (version == 4) ((fp_v4 *)plugin)->init(&ctx, &mask, "test", hash, nodes, ranks, rank, NULL);
	else ((fp_old *)plugin)->init(&ctx, &mask);
	printf("mask %d\n", mask);
	fflush(stdout);
	pthread_t px;
	pthread_create(&px, NULL, proxy, NULL);
	late_func = getenv("HARNESS_LATE_FUNC");
	if (step_mode && late_func == NULL) late_func = "AllReduce";
	int64_t prev[64] = {0}, ks[64], ke[64];
	const char *fork_env = getenv("HARNESS_FORK_AT");
	int fork_at = fork_env ? atoi(fork_env) : -1;
	pid_t child = -1;
	for (int i = 0; i < ops; i++) {
		if (i == fork_at) {
			child = fork();
			if (child == 0) {
				int64_t until = now_ns() + 200000000ll;
				while (now_ns() < until) {
					void *p = malloc(1 << 16);
					memset(p, 1, 1 << 16);
					free(p);
				}
				const char *how = getenv("HARNESS_FORK_EXIT");
				if (how && strcmp(how, "exit") == 0) exit(0);
				_exit(0);
			}
		}
		timeline(i, ranks, prev, ks, ke);
		sleep_until(issue_at(rank, i));
		fp_union u;
		memset(&u, 0, sizeof u);
		// A step of a training job: an allreduce, an allgather and a
		// broadcast. NCCL numbers each function's operations on its own
		// (seqNumber counts that function's calls on the communicator).
		u.coll.seqNumber = (uint64_t)(i / 3), u.coll.func = funcs[i % 3], u.coll.count = (size_t)count, u.coll.datatype = "ncclFloat32";
		u.coll.nChannels = 2, u.coll.algo = "RING", u.coll.proto = "LL";
		void *coll = (mask & (1 << 1)) ? start(ctx, 1 << 1, NULL, rank, &u) : NULL;
		if (nvlink_add != NULL) {
			nvlink_add(moved(i, ranks), moved(i, ranks));
		}
		if (sends > 0 && (mask & (1 << 2))) {
			// A send to the next rank and a receive from the one before.
			for (int k = 0; k < 2; k++) {
				fp_union p;
				memset(&p, 0, sizeof p);
				p.p2p.func = k == 0 ? "Send" : "Recv", p.p2p.count = (size_t)sends, p.p2p.datatype = "ncclInt8";
				p.p2p.peer = (rank + (k == 0 ? 1 : ranks - 1)) % ranks, p.p2p.nChannels = 1;
				stop(start(ctx, 1 << 2, NULL, rank, &p));
			}
		}
		if (sends > 0 && nvlink_add != NULL) {
			nvlink_add((int64_t)(sends * counted), (int64_t)(sends * counted));
		}
		// The plan's times, or later where this process was held up.
		int64_t kstart = ks[rank], kstop = ke[rank], now = now_ns() + 1000;
		if (kstart < now) kstart = now;
		if (kstop < kstart + WORK_NS) kstop = kstart + WORK_NS;
		if (mask & (1 << 6)) {
			pthread_mutex_lock(&qmu);
			queue[qtail % QLEN] = (struct kernel){ctx, coll, rank, ranks, kstart, kstop, skew};
			qtail++;
			pthread_cond_signal(&qcv);
			pthread_mutex_unlock(&qmu);
		} else {
			stop(coll);
		}
	}
	pthread_mutex_lock(&qmu);
	qdone = 1;
	pthread_cond_signal(&qcv);
	pthread_mutex_unlock(&qmu);
	pthread_join(px, NULL);
	if (child > 0) {
		int st = -1;
		int64_t until = now_ns() + 5000000000ll;
		while (waitpid(child, &st, WNOHANG) == 0 && now_ns() < until) sleep_until(now_ns() + 10000000ll);
		printf("child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 3;
	}
	// The job ends as soon as its communicator is finalized: the plugin
	// sends its last operations then, or they are lost.
	if (version >= 5) ((fp_v5 *)plugin)->finalize(ctx);
	else if (version == 4) ((fp_v4 *)plugin)->finalize(ctx);
	else ((fp_old *)plugin)->finalize(ctx);
	return 0;
}
