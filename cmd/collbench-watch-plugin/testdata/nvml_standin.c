// nvml_standin.c plays NVML for the watch plugin's test: the process's
// GPU has NVLINKS (4) active links, and its NVLink throughput counters
// (NVML's fields 138 and 139, in KiB, split evenly over the links) count
// what the harness says its operations moved (standin_nvlink_add) and
// what another program copies out of and into the GPU at a rate between
// two times (standin_nvlink_plant). With NVML_STANDIN_HANG set, reading
// the counters never returns.
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvmlabi.h" // the plugin's declaration of a field value

enum { NVLINKS = 4 };

static _Atomic int64_t moved_tx, moved_rx;
static double out_bps, in_bps;
static int64_t plant_from, plant_to;

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void standin_nvlink_add(int64_t tx, int64_t rx) {
	atomic_fetch_add(&moved_tx, tx);
	atomic_fetch_add(&moved_rx, rx);
}

void standin_nvlink_plant(double out, double in, int64_t from_ns, int64_t to_ns) {
	out_bps = out, in_bps = in, plant_from = from_ns, plant_to = to_ns;
}

int nvmlInit_v2(void) { return 0; }

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
	(void)bus;
	*dev = (void *)1;
	return 0;
}

int nvmlDeviceGetNvLinkState(void *dev, unsigned int link, int *on) {
	(void)dev;
	*on = link < NVLINKS;
	return 0;
}

int nvmlDeviceGetFieldValues(void *dev, int n, cbw_field *v) {
	(void)dev;
	if (getenv("NVML_STANDIN_HANG") != NULL) {
		for (;;) {
			pause(); // a driver that never answers
		}
	}
	int64_t now = now_ns(), to = now < plant_to ? now : plant_to;
	double planted = to > plant_from ? (double)(to - plant_from) / 1e9 : 0;
	int64_t tx = atomic_load(&moved_tx) + (int64_t)(out_bps * planted), rx = atomic_load(&moved_rx) + (int64_t)(in_bps * planted);
	for (int i = 0; i < n; i++) {
		v[i].ret = 0;
		v[i].timestamp = now / 1000;
		if (v[i].field == CBW_FI_NVLINK_DATA_TX) {
			v[i].value.ull = (unsigned long long)(tx / NVLINKS / 1024);
		} else if (v[i].field == CBW_FI_NVLINK_DATA_RX) {
			v[i].value.ull = (unsigned long long)(rx / NVLINKS / 1024);
		} else {
			v[i].ret = 2; // not supported
		}
	}
	return 0;
}
