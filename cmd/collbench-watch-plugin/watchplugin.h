// watchplugin.h: what the watch plugin's NCCL side (plugin.c) hands its Go
// side (main.go).
#ifndef COLLBENCH_WATCH_PLUGIN_H
#define COLLBENCH_WATCH_PLUGIN_H

#include <stdint.h>

#define CBW_SLOTS 1024        // operations in flight per communicator
#define CBW_MAX_CONTEXTS 1024 // communicators followed per process
#define CBW_LINK_EVERY 4      // one operation in this many records its sends' times
#define CBW_LINKS 4           // (peer, channel) sends recorded per operation
#define CBW_STEPS 8           // steps in flight per send (NCCL keeps 8)
_Static_assert(CBW_SLOTS % CBW_LINK_EVERY == 0, "a recording operation's slot has a block of sends");

typedef struct cbw_ctx cbw_ctx;

// cbw_info describes one communicator as this process sees it.
typedef struct {
	uint64_t hash;
	int rank, ranks, dropped, nodes;
	// wire_tx and wire_rx bound what its operations put on the GPU's
	// links each way, since it began (plugin.c's wire_bound).
	int64_t wire_tx, wire_rx;
	char bus[32];
} cbw_info;

// cbw_sent is what one rank sent one peer on one channel in one
// operation over the network: bytes, and the time its steps spent on the
// wire (from being posted to the network until done), in ns.
typedef struct {
	int peer;
	int64_t bytes, wire_ns;
} cbw_sent;

// cbw_done is one finished operation: host times from CLOCK_MONOTONIC,
// GPU times from the GPU's global timer (ns); nsent sends where the
// operation was one that records them and went over the network.
typedef struct {
	uint64_t seq;
	char func[24];  // the collective's name as NCCL gave it ("" when it did not)
	char dtype[24]; // its element type's name as NCCL gave it ("" when it did not)
	int64_t count;  // the count it was called with
	int64_t issue, gpu_start, gpu_stop, seen_minus_gpu;
	int nsent;
	cbw_sent sent[CBW_LINKS];
} cbw_done;

void cbw_enable(int on);
int cbw_enabled(void);
int64_t cbw_now(void); // CLOCK_MONOTONIC, ns

// Which NCCL the process runs (library.c): the profiler interface version
// NCCL initialised the plugin with, and a line naming the library.
enum { CBW_PATH = 512 };
void cbw_set_interface(int version);
void cbw_library(char *buf, int n);
int cbw_contexts(void);
int cbw_refused(void);
int cbw_context(int i, cbw_info *out);
// cbw_take copies up to max finished operations of context i out and frees
// their slots; operations issued before older_than (ns) and still not
// finished are freed and counted as dropped.
int cbw_take(int i, int64_t older_than, cbw_done *out, int max);

// The GPU's NVLink traffic, as its hardware counts it (nvlink.c: NVML,
// loaded at run time). cbw_nvml_open loads the library at path (the
// system's where NULL or empty) once; cbw_nvlink_gpu finds the GPU of a
// PCI bus id and its active links, and returns its index, or -1 with why;
// cbw_nvlink_read gives the bytes its active links carried each way.
int cbw_nvml_open(const char *path, char *why, int n);
int cbw_nvlink_gpu(const char *bus, char *why, int n);
int cbw_nvlink_read(int gpu, int64_t *tx, int64_t *rx);

#endif
