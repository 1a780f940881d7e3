//go:build mpi

package mpi

// What the rows say about MPI's algorithm. MPI has no call that names the
// algorithm a collective ran; Open MPI's settings do say when one is
// forced. They are read through the MPI tool information interface
// (MPI_T control variables, cgo: gompi has none of it).

/*
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

static int cb_t_started = 0;

static int cb_t_init(void) {
	int prov;
	if (cb_t_started) return MPI_SUCCESS;
	int rc = MPI_T_init_thread(MPI_THREAD_SINGLE, &prov);
	if (rc == MPI_SUCCESS) cb_t_started = 1;
	return rc;
}

// cb_cvar reads the control variable name: an integer or a bool into *val
// (and the name of its enum item, when the variable has one, into item),
// or a string into str. It returns 0, or -1 when no such variable exists,
// or -2 when it cannot be read.
static int cb_cvar(const char *name, long *val, char *item, int itemlen, char *str, int strlen_) {
	int idx, verb, bind, scope, nlen = 0, dlen = 0, count;
	MPI_Datatype dt;
	MPI_T_enum en;
	MPI_T_cvar_handle h;
	item[0] = 0;
	str[0] = 0;
	if (MPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS) return -1;
	if (MPI_T_cvar_get_info(idx, NULL, &nlen, &verb, &dt, &en, NULL, &dlen, &bind, &scope) != MPI_SUCCESS) return -2;
	if (bind != MPI_T_BIND_NO_OBJECT) return -2;
	if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) != MPI_SUCCESS) return -2;
	int rc = MPI_SUCCESS;
	if (dt == MPI_INT && count == 1) {
		int v = 0;
		rc = MPI_T_cvar_read(h, &v);
		*val = v;
	} else if (dt == MPI_C_BOOL && count == 1) {
		_Bool v = 0;
		rc = MPI_T_cvar_read(h, &v);
		*val = v;
	} else if (dt == MPI_CHAR && count < strlen_) {
		rc = MPI_T_cvar_read(h, str);
		str[count] = 0;
	} else {
		rc = MPI_ERR_TYPE;
	}
	MPI_T_cvar_handle_free(&h);
	if (rc != MPI_SUCCESS) return -2;
	if (dt == MPI_INT && en != MPI_T_ENUM_NULL) {
		int num = 0, l = 0;
		if (MPI_T_enum_get_info(en, &num, NULL, &l) != MPI_SUCCESS) return 0;
		for (int j = 0; j < num; j++) {
			int v, il = itemlen;
			if (MPI_T_enum_get_item(en, j, &v, item, &il) == MPI_SUCCESS && v == *val) return 0;
		}
		item[0] = 0;
	}
	return 0;
}
*/
import "C"

import (
	"strings"
	"unsafe"
)

// readCvar reads one control variable (on the MPI thread).
func readCvar(name string) cvar {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var n C.long
	item := make([]byte, 256)
	str := make([]byte, 4096)
	rc := C.cb_cvar(cn, &n, (*C.char)(unsafe.Pointer(&item[0])), C.int(len(item)), (*C.char)(unsafe.Pointer(&str[0])), C.int(len(str)))
	if rc != 0 {
		return cvar{}
	}
	cstr := func(b []byte) string {
		if i := strings.IndexByte(string(b), 0); i >= 0 {
			return string(b[:i])
		}
		return string(b)
	}
	return cvar{found: true, n: int64(n), item: cstr(item), str: cstr(str)}
}

// readCollSettings reads them; on the MPI thread, once MPI has started.
func readCollSettings() collSettings {
	if C.cb_t_init() != C.MPI_SUCCESS {
		return collSettings{}
	}
	return settingsFrom(readCvar)
}
