// cuda_standin.c plays the CUDA driver for the watch plugin's test, built
// with the soname libcuda.so.1 so that the plugin finds it loaded: the
// current device is 0, and its PCI bus id is 0000:XX:00.0 with XX 0x10
// plus the rank the harness sets (standin_cuda_rank), one GPU per rank.
#include <stdio.h>

static int rank;

void standin_cuda_rank(int r) { rank = r; }

int cuCtxGetDevice(int *dev) {
	*dev = 0;
	return 0;
}

int cuDeviceGetPCIBusId(char *buf, int len, int dev) {
	(void)dev;
	snprintf(buf, (size_t)len, "0000:%02X:00.0", 0x10 + rank);
	return 0;
}
