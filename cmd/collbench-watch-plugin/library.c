// library.c: which NCCL the process runs, for the collector's record: the
// library NCCL was loaded from (found among the process's loaded objects),
// its version (its own ncclGetVersion), and the profiler interface
// version NCCL initialised the plugin with.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "watchplugin.h"

static atomic_int iface;

void cbw_set_interface(int version) { atomic_store(&iface, version); }

// find_nccl copies the path of the first loaded object whose name holds
// libnccl.so into data (CBW_PATH bytes).
static int find_nccl(struct dl_phdr_info *info, size_t size, void *data) {
	(void)size;
	if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libnccl.so") != NULL) {
		snprintf((char *)data, CBW_PATH, "%s", info->dlpi_name);
		return 1;
	}
	return 0;
}

void cbw_library(char *buf, int n) {
	char path[CBW_PATH] = {0};
	dl_iterate_phdr(find_nccl, path);
	int (*get)(int *) = NULL;
	void *h = NULL;
	if (path[0] != 0) {
		h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
		if (h != NULL) {
			get = (int (*)(int *))dlsym(h, "ncclGetVersion");
		}
	} else {
		// NCCL linked into the program itself
		get = (int (*)(int *))dlsym(RTLD_DEFAULT, "ncclGetVersion");
	}
	int code = 0;
	if (get != NULL && get(&code) != 0) {
		code = 0;
	}
	if (h != NULL) {
		dlclose(h);
	}
	char version[32] = "NCCL, version unknown";
	if (code >= 10000) { // major*10000 + minor*100 + patch, from NCCL 2.9
		snprintf(version, sizeof version, "NCCL %d.%d.%d", code / 10000, code / 100 % 100, code % 100);
	} else if (code > 0) { // major*1000 + minor*100 + patch, before
		snprintf(version, sizeof version, "NCCL %d.%d.%d", code / 1000, code / 100 % 10, code % 100);
	}
	snprintf(buf, (size_t)n, "%s (%s), profiler interface v%d", version, path[0] != 0 ? path : "in the program", atomic_load(&iface));
}
