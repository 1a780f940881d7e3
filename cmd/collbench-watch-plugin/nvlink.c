// nvlink.c: a GPU's NVLink traffic as its hardware counts it, read through
// NVML, which is loaded at run time (dlopen) with collbench's own
// declarations of the four functions it calls and of a field value
// (nvmlabi.h).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nvmlabi.h"
#include "watchplugin.h"

// NVML's most links per GPU, and its "enabled".
enum { MAX_LINKS = 18, FEATURE_ENABLED = 1, MAX_GPUS = 16 };

typedef void *nvml_device;

static struct {
	int tried, ok;
	char why[160];
	int (*init)(void);
	int (*by_bus)(const char *, nvml_device *);
	int (*link_state)(nvml_device, unsigned int, int *);
	int (*fields)(nvml_device, int, cbw_field *);
} nv;

static struct {
	char bus[32];
	nvml_device dev;
	int links;
	cbw_field f[2 * MAX_LINKS];
} gpus[MAX_GPUS];
static int ngpus;

int cbw_nvml_open(const char *path, char *why, int n) {
	if (!nv.tried) {
		nv.tried = 1;
		const char *lib = path != NULL && path[0] != 0 ? path : "libnvidia-ml.so.1";
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		if (h == NULL) {
			snprintf(nv.why, sizeof nv.why, "NVML (%s) cannot be loaded", lib);
		} else {
			nv.init = (int (*)(void))dlsym(h, "nvmlInit_v2");
			nv.by_bus = (int (*)(const char *, nvml_device *))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
			nv.link_state = (int (*)(nvml_device, unsigned int, int *))dlsym(h, "nvmlDeviceGetNvLinkState");
			nv.fields = (int (*)(nvml_device, int, cbw_field *))dlsym(h, "nvmlDeviceGetFieldValues");
			int ret = -1;
			if (nv.init == NULL || nv.by_bus == NULL || nv.link_state == NULL || nv.fields == NULL) {
				snprintf(nv.why, sizeof nv.why, "NVML (%s) lacks the functions that read NVLink traffic", lib);
			} else if ((ret = nv.init()) != 0) {
				snprintf(nv.why, sizeof nv.why, "NVML (%s) did not initialise (error %d)", lib, ret);
			} else {
				nv.ok = 1;
			}
		}
	}
	if (!nv.ok && why != NULL && n > 0) {
		snprintf(why, (size_t)n, "%s", nv.why);
	}
	return nv.ok ? 0 : -1;
}

int cbw_nvlink_gpu(const char *bus, char *why, int n) {
	for (int i = 0; i < ngpus; i++) {
		if (strcmp(gpus[i].bus, bus) == 0) {
			return i;
		}
	}
	if (!nv.ok || ngpus >= MAX_GPUS) {
		snprintf(why, (size_t)n, "%s", nv.ok ? "more GPUs in this process than read" : "NVML is not open");
		return -1;
	}
	nvml_device dev = NULL;
	int ret = nv.by_bus(bus, &dev);
	if (ret != 0) {
		snprintf(why, (size_t)n, "NVML does not know GPU %s (error %d)", bus, ret);
		return -1;
	}
	int links = 0;
	cbw_field *f = gpus[ngpus].f;
	for (unsigned int l = 0; l < MAX_LINKS; l++) {
		int on = 0;
		if (nv.link_state(dev, l, &on) == 0 && on == FEATURE_ENABLED) {
			memset(&f[2 * links], 0, 2 * sizeof(cbw_field));
			f[2 * links].field = CBW_FI_NVLINK_DATA_TX, f[2 * links].scope = l;
			f[2 * links + 1].field = CBW_FI_NVLINK_DATA_RX, f[2 * links + 1].scope = l;
			links++;
		}
	}
	if (links == 0) {
		snprintf(why, (size_t)n, "GPU %s has no active NVLink", bus);
		return -1;
	}
	snprintf(gpus[ngpus].bus, sizeof gpus[ngpus].bus, "%s", bus);
	gpus[ngpus].dev = dev;
	gpus[ngpus].links = links;
	return ngpus++;
}

int cbw_nvlink_read(int gpu, int64_t *tx, int64_t *rx) {
	if (gpu < 0 || gpu >= ngpus) {
		return -1;
	}
	cbw_field *f = gpus[gpu].f;
	if (nv.fields(gpus[gpu].dev, 2 * gpus[gpu].links, f) != 0) {
		return -1;
	}
	int64_t t = 0, r = 0;
	for (int i = 0; i < 2 * gpus[gpu].links; i++) {
		if (f[i].ret != 0) {
			return -1;
		}
		int64_t bytes = (int64_t)f[i].value.ull * 1024;
		if (f[i].field == CBW_FI_NVLINK_DATA_TX) {
			t += bytes;
		} else {
			r += bytes;
		}
	}
	*tx = t, *rx = r;
	return 0;
}
