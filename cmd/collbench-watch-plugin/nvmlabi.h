// nvmlabi.h: collbench's own declaration of the one NVML type the watch
// plugin hands NVML (nvmlFieldValue_t), and the field ids it reads, from
// NVML's documented layout. The test's NVML stand-in uses it too.
#ifndef COLLBENCH_NVMLABI_H
#define COLLBENCH_NVMLABI_H

// cbw_field is a field value: the field and its scope (a link), when it
// was read, its value's type, the read's result and the value.
typedef struct {
	unsigned int field, scope;
	long long timestamp, latency_us;
	int value_type, ret;
	union {
		unsigned long long ull;
		double d;
	} value;
} cbw_field;
_Static_assert(sizeof(cbw_field) == 40, "nvmlFieldValue_t is 40 bytes");

// The data each NVLink sent and received since the driver loaded, in KiB.
enum { CBW_FI_NVLINK_DATA_TX = 138, CBW_FI_NVLINK_DATA_RX = 139 };

#endif
