// Package cuda is a minimal binding of the CUDA driver API (libcuda.so.1),
// loaded at run time with dlopen, so collbench builds without the CUDA
// toolkit. It declares only the types and calls collbench uses.
package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent, *CUmodule, *CUfunction, *CUgraph, *CUgraphExec;

#define CB_MISSING 999999

static void *cb_lib;
static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDriverGetVersion)(int*);
static CUresult (*p_cuDeviceGetCount)(int*);
static CUresult (*p_cuDeviceGet)(CUdevice*, int);
static CUresult (*p_cuDeviceGetName)(char*, int, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int*, int, CUdevice);
static CUresult (*p_cuDeviceGetPCIBusId)(char*, int, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemAlloc)(CUdeviceptr*, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemGetInfo)(size_t*, size_t*);
static CUresult (*p_cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
static CUresult (*p_cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
static CUresult (*p_cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuStreamCreate)(CUstream*, unsigned);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuEventCreate)(CUevent*, unsigned);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuEventElapsedTime)(float*, CUevent, CUevent);
static CUresult (*p_cuModuleLoadData)(CUmodule*, const void*);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
static CUresult (*p_cuGetErrorName)(CUresult, const char**);
static CUresult (*p_cuGetErrorString)(CUresult, const char**);
static CUresult (*p_cuStreamBeginCapture)(CUstream, int);
static CUresult (*p_cuStreamEndCapture)(CUstream, CUgraph*);
static CUresult (*p_cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
static CUresult (*p_cuGraphLaunch)(CUgraphExec, CUstream);
static CUresult (*p_cuGraphExecDestroy)(CUgraphExec);
static CUresult (*p_cuGraphDestroy)(CUgraph);

static void *cb_sym2(const char *a, const char *b) {
	void *p = a ? dlsym(cb_lib, a) : NULL;
	if (!p && b) p = dlsym(cb_lib, b);
	return p;
}

// cb_load opens the library and resolves every symbol; it returns the name
// of a missing required symbol, or NULL.
static const char *cb_load(const char *path, char *err, size_t errlen) {
	cb_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!cb_lib) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
		return "";
	}
#define REQ(var, a, b) if (!(*(void**)&var = cb_sym2(a, b))) return a;
#define OPT(var, a, b) *(void**)&var = cb_sym2(a, b);
	REQ(p_cuInit, "cuInit", NULL)
	REQ(p_cuDriverGetVersion, "cuDriverGetVersion", NULL)
	REQ(p_cuDeviceGetCount, "cuDeviceGetCount", NULL)
	REQ(p_cuDeviceGet, "cuDeviceGet", NULL)
	REQ(p_cuDeviceGetName, "cuDeviceGetName", NULL)
	REQ(p_cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL)
	REQ(p_cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", NULL)
	REQ(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL)
	REQ(p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
	REQ(p_cuCtxSetCurrent, "cuCtxSetCurrent", NULL)
	REQ(p_cuMemAlloc, "cuMemAlloc_v2", NULL)
	REQ(p_cuMemFree, "cuMemFree_v2", NULL)
	REQ(p_cuMemGetInfo, "cuMemGetInfo_v2", NULL)
	REQ(p_cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL)
	REQ(p_cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL)
	REQ(p_cuMemsetD8Async, "cuMemsetD8Async", NULL)
	REQ(p_cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL)
	REQ(p_cuStreamCreate, "cuStreamCreate", NULL)
	REQ(p_cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy")
	REQ(p_cuStreamSynchronize, "cuStreamSynchronize", NULL)
	REQ(p_cuEventCreate, "cuEventCreate", NULL)
	REQ(p_cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy")
	REQ(p_cuEventRecord, "cuEventRecord", NULL)
	REQ(p_cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")
	REQ(p_cuModuleLoadData, "cuModuleLoadData", NULL)
	REQ(p_cuModuleUnload, "cuModuleUnload", NULL)
	REQ(p_cuModuleGetFunction, "cuModuleGetFunction", NULL)
	REQ(p_cuLaunchKernel, "cuLaunchKernel", NULL)
	OPT(p_cuGetErrorName, "cuGetErrorName", NULL)
	OPT(p_cuGetErrorString, "cuGetErrorString", NULL)
	OPT(p_cuStreamBeginCapture, "cuStreamBeginCapture_v2", "cuStreamBeginCapture")
	OPT(p_cuStreamEndCapture, "cuStreamEndCapture", NULL)
	OPT(p_cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", NULL)
	OPT(p_cuGraphLaunch, "cuGraphLaunch", NULL)
	OPT(p_cuGraphExecDestroy, "cuGraphExecDestroy", NULL)
	OPT(p_cuGraphDestroy, "cuGraphDestroy", NULL)
#undef REQ
#undef OPT
	return NULL;
}

#define CB_CALL(fn, ...) (fn ? fn(__VA_ARGS__) : CB_MISSING)
static CUresult cb_cuInit(unsigned f) { return p_cuInit(f); }
static CUresult cb_cuDriverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
static CUresult cb_cuDeviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
static CUresult cb_cuDeviceGet(CUdevice *d, int o) { return p_cuDeviceGet(d, o); }
static CUresult cb_cuDeviceGetName(char *s, int n, CUdevice d) { return p_cuDeviceGetName(s, n, d); }
static CUresult cb_cuDeviceGetAttribute(int *v, int a, CUdevice d) { return p_cuDeviceGetAttribute(v, a, d); }
static CUresult cb_cuDeviceGetPCIBusId(char *s, int n, CUdevice d) { return p_cuDeviceGetPCIBusId(s, n, d); }
static CUresult cb_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return p_cuDevicePrimaryCtxRetain(c, d); }
static CUresult cb_cuDevicePrimaryCtxRelease(CUdevice d) { return p_cuDevicePrimaryCtxRelease(d); }
static CUresult cb_cuCtxSetCurrent(CUcontext c) { return p_cuCtxSetCurrent(c); }
static CUresult cb_cuMemAlloc(CUdeviceptr *p, size_t n) { return p_cuMemAlloc(p, n); }
static CUresult cb_cuMemFree(CUdeviceptr p) { return p_cuMemFree(p); }
static CUresult cb_cuMemGetInfo(size_t *f, size_t *t) { return p_cuMemGetInfo(f, t); }
static CUresult cb_cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) { return p_cuMemcpyHtoD(d, s, n); }
static CUresult cb_cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) { return p_cuMemcpyDtoH(d, s, n); }
static CUresult cb_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return p_cuMemsetD8Async(d, v, n, s); }
static CUresult cb_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return p_cuMemcpyDtoDAsync(d, s, n, st); }
static void *cb_copy_fn(void) { return (void *)p_cuMemcpyDtoDAsync; }
static CUresult cb_cuStreamCreate(CUstream *s, unsigned f) { return p_cuStreamCreate(s, f); }
static CUresult cb_cuStreamDestroy(CUstream s) { return p_cuStreamDestroy(s); }
static CUresult cb_cuStreamSynchronize(CUstream s) { return p_cuStreamSynchronize(s); }
static CUresult cb_cuEventCreate(CUevent *e, unsigned f) { return p_cuEventCreate(e, f); }
static CUresult cb_cuEventDestroy(CUevent e) { return p_cuEventDestroy(e); }
static CUresult cb_cuEventRecord(CUevent e, CUstream s) { return p_cuEventRecord(e, s); }
static CUresult cb_cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return p_cuEventElapsedTime(ms, a, b); }
static CUresult cb_cuModuleLoadData(CUmodule *m, const void *img) { return p_cuModuleLoadData(m, img); }
static CUresult cb_cuModuleUnload(CUmodule m) { return p_cuModuleUnload(m); }
static CUresult cb_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n) { return p_cuModuleGetFunction(f, m, n); }
static CUresult cb_cuLaunchKernel(CUfunction f, unsigned gx, unsigned bx, CUstream s, void **args) {
	return p_cuLaunchKernel(f, gx, 1, 1, bx, 1, 1, 0, s, args, NULL);
}
static CUresult cb_cuStreamBeginCapture(CUstream s, int mode) { return CB_CALL(p_cuStreamBeginCapture, s, mode); }
static CUresult cb_cuStreamEndCapture(CUstream s, CUgraph *g) { return CB_CALL(p_cuStreamEndCapture, s, g); }
static CUresult cb_cuGraphInstantiate(CUgraphExec *e, CUgraph g) { return CB_CALL(p_cuGraphInstantiateWithFlags, e, g, 0); }
static CUresult cb_cuGraphLaunch(CUgraphExec e, CUstream s) { return CB_CALL(p_cuGraphLaunch, e, s); }
static CUresult cb_cuGraphExecDestroy(CUgraphExec e) { return CB_CALL(p_cuGraphExecDestroy, e); }
static CUresult cb_cuGraphDestroy(CUgraph g) { return CB_CALL(p_cuGraphDestroy, g); }
static int cb_can_capture(void) {
	return p_cuStreamBeginCapture && p_cuStreamEndCapture && p_cuGraphInstantiateWithFlags && p_cuGraphLaunch;
}
static const char *cb_errname(CUresult r) { const char *s = NULL; if (p_cuGetErrorName) p_cuGetErrorName(r, &s); return s; }
static const char *cb_errstr(CUresult r) { const char *s = NULL; if (p_cuGetErrorString) p_cuGetErrorString(r, &s); return s; }
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// Library is the file name the driver library is opened by.
const Library = "libcuda.so.1"

// ErrOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
const ErrOutOfMemory = 2

// Error is a failed driver call.
type Error struct {
	Call string
	Code int
	Name string
	Msg  string
}

func (e *Error) Error() string {
	if e.Code == C.CB_MISSING {
		return fmt.Sprintf("%s: not available in this driver", e.Call)
	}
	if e.Name != "" {
		return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
	}
	return fmt.Sprintf("%s: CUDA error %d", e.Call, e.Code)
}

// IsOutOfMemory reports whether err is a driver out-of-memory error.
func IsOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == ErrOutOfMemory
}

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r)}
	if r != C.CB_MISSING {
		if s := C.cb_errname(r); s != nil {
			e.Name = C.GoString(s)
		}
		if s := C.cb_errstr(r); s != nil {
			e.Msg = C.GoString(s)
		}
	}
	return e
}

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libcuda.so.1 and initialises the driver. It is safe to call
// more than once; every call returns the first call's result.
func Load() error {
	loadOnce.Do(func() {
		var buf [512]C.char
		name := C.CString(Library)
		defer C.free(unsafe.Pointer(name))
		if missing := C.cb_load(name, &buf[0], C.size_t(len(buf))); missing != nil {
			if m := C.GoString(missing); m != "" {
				loadErr = fmt.Errorf("%s lacks %s (driver too old?)", Library, m)
			} else {
				// The loader's own words only when they add something to
				// "not found" (a wrong architecture, a missing dependency).
				detail := C.GoString(&buf[0])
				if strings.Contains(detail, "No such file or directory") {
					loadErr = fmt.Errorf("%s not found (is the NVIDIA driver installed?)", Library)
				} else {
					loadErr = fmt.Errorf("%s cannot be loaded (is the NVIDIA driver installed?): %s", Library, detail)
				}
			}
			return
		}
		loadErr = check("cuInit", C.cb_cuInit(0))
	})
	return loadErr
}

// DriverVersion returns the CUDA version the driver supports, e.g. 13000 for 13.0.
func DriverVersion() (int, error) {
	var v C.int
	err := check("cuDriverGetVersion", C.cb_cuDriverGetVersion(&v))
	return int(v), err
}

// FormatVersion writes a driver version code as major.minor.
func FormatVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// DeviceCount returns the number of visible GPUs.
func DeviceCount() (int, error) {
	var n C.int
	err := check("cuDeviceGetCount", C.cb_cuDeviceGetCount(&n))
	return int(n), err
}

// Device is a GPU ordinal.
type Device int

// Attribute ids used by collbench.
const (
	AttrMultiprocessors = 16
	AttrPCIBus          = 33
	AttrPCIDevice       = 34
	AttrPCIDomain       = 50
	AttrCCMajor         = 75
	AttrCCMinor         = 76
)

func (d Device) handle() (C.CUdevice, error) {
	var h C.CUdevice
	err := check("cuDeviceGet", C.cb_cuDeviceGet(&h, C.int(d)))
	return h, err
}

// Name returns the GPU's marketing name.
func (d Device) Name() (string, error) {
	h, err := d.handle()
	if err != nil {
		return "", err
	}
	var buf [256]C.char
	if err := check("cuDeviceGetName", C.cb_cuDeviceGetName(&buf[0], C.int(len(buf)), h)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Attribute returns a device attribute.
func (d Device) Attribute(attr int) (int, error) {
	h, err := d.handle()
	if err != nil {
		return 0, err
	}
	var v C.int
	err = check("cuDeviceGetAttribute", C.cb_cuDeviceGetAttribute(&v, C.int(attr), h))
	return int(v), err
}

// PCIBusID returns the GPU's PCI address, e.g. 0000:00:06.0.
func (d Device) PCIBusID() (string, error) {
	h, err := d.handle()
	if err != nil {
		return "", err
	}
	var buf [64]C.char
	if err := check("cuDeviceGetPCIBusId", C.cb_cuDeviceGetPCIBusId(&buf[0], C.int(len(buf)), h)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// ComputeCapability returns major and minor.
func (d Device) ComputeCapability() (int, int, error) {
	ma, err := d.Attribute(AttrCCMajor)
	if err != nil {
		return 0, 0, err
	}
	mi, err := d.Attribute(AttrCCMinor)
	return ma, mi, err
}

// Context is a driver context.
type Context unsafe.Pointer

// RetainPrimary retains d's primary context.
func (d Device) RetainPrimary() (Context, error) {
	h, err := d.handle()
	if err != nil {
		return nil, err
	}
	var c C.CUcontext
	err = check("cuDevicePrimaryCtxRetain", C.cb_cuDevicePrimaryCtxRetain(&c, h))
	return Context(c), err
}

// ReleasePrimary releases d's primary context.
func (d Device) ReleasePrimary() error {
	h, err := d.handle()
	if err != nil {
		return err
	}
	return check("cuDevicePrimaryCtxRelease", C.cb_cuDevicePrimaryCtxRelease(h))
}

// SetCurrent makes c current on the calling OS thread; callers lock the thread.
func SetCurrent(c Context) error {
	return check("cuCtxSetCurrent", C.cb_cuCtxSetCurrent(C.CUcontext(c)))
}

// DevPtr is a device address.
type DevPtr uint64

// Alloc allocates device memory in the current context.
func Alloc(bytes int64) (DevPtr, error) {
	var p C.CUdeviceptr
	err := check("cuMemAlloc", C.cb_cuMemAlloc(&p, C.size_t(bytes)))
	return DevPtr(p), err
}

// Free releases device memory.
func Free(p DevPtr) error { return check("cuMemFree", C.cb_cuMemFree(C.CUdeviceptr(p))) }

// MemInfo returns free and total device memory of the current context's GPU.
func MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = check("cuMemGetInfo", C.cb_cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

// CopyToDevice copies host bytes to device memory (synchronous).
func CopyToDevice(dst DevPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	cs := C.CBytes(src)
	defer C.free(cs)
	return check("cuMemcpyHtoD", C.cb_cuMemcpyHtoD(C.CUdeviceptr(dst), cs, C.size_t(len(src))))
}

// CopyToHost copies device memory into dst (synchronous).
func CopyToHost(dst []byte, src DevPtr) error {
	if len(dst) == 0 {
		return nil
	}
	tmp := C.malloc(C.size_t(len(dst)))
	defer C.free(tmp)
	if err := check("cuMemcpyDtoH", C.cb_cuMemcpyDtoH(tmp, C.CUdeviceptr(src), C.size_t(len(dst)))); err != nil {
		return err
	}
	copy(dst, unsafe.Slice((*byte)(tmp), len(dst)))
	return nil
}

// Stream is a driver stream.
type Stream unsafe.Pointer

// StreamNonBlocking is CU_STREAM_NON_BLOCKING: the stream does not
// synchronise with the legacy default stream.
const StreamNonBlocking = 1

// NewStream creates a stream in the current context with flags (0 or
// StreamNonBlocking).
func NewStream(flags uint) (Stream, error) {
	var s C.CUstream
	err := check("cuStreamCreate", C.cb_cuStreamCreate(&s, C.uint(flags)))
	return Stream(s), err
}

// CopyFunc is the driver's cuMemcpyDtoDAsync itself, for a binding whose
// C loop enqueues copies among other calls without coming back to Go
// (nil before Load).
func CopyFunc() unsafe.Pointer { return C.cb_copy_fn() }

// CopyError is the error of a cuMemcpyDtoDAsync that CopyFunc's caller
// made, from its CUresult.
func CopyError(code int) error { return check("cuMemcpyDtoDAsync", C.CUresult(code)) }

// CopyAsync copies bytes between device buffers, in stream order.
func CopyAsync(dst, src DevPtr, bytes int64, s Stream) error {
	if bytes == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", C.cb_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes), C.CUstream(s)))
}

// DestroyStream destroys s.
func DestroyStream(s Stream) error {
	return check("cuStreamDestroy", C.cb_cuStreamDestroy(C.CUstream(s)))
}

// Synchronize waits for everything issued on s.
func Synchronize(s Stream) error {
	return check("cuStreamSynchronize", C.cb_cuStreamSynchronize(C.CUstream(s)))
}

// MemsetAsync sets bytes of device memory to v, in stream order.
func MemsetAsync(p DevPtr, v byte, bytes int64, s Stream) error {
	if bytes == 0 {
		return nil
	}
	return check("cuMemsetD8Async", C.cb_cuMemsetD8Async(C.CUdeviceptr(p), C.uchar(v), C.size_t(bytes), C.CUstream(s)))
}

// Event is a driver event.
type Event unsafe.Pointer

// NewEvent creates an event that records timing.
func NewEvent() (Event, error) {
	var e C.CUevent
	err := check("cuEventCreate", C.cb_cuEventCreate(&e, 0))
	return Event(e), err
}

// DestroyEvent destroys e.
func DestroyEvent(e Event) error { return check("cuEventDestroy", C.cb_cuEventDestroy(C.CUevent(e))) }

// Record records e on s.
func Record(e Event, s Stream) error {
	return check("cuEventRecord", C.cb_cuEventRecord(C.CUevent(e), C.CUstream(s)))
}

// Elapsed returns the milliseconds between two recorded events.
func Elapsed(start, end Event) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.cb_cuEventElapsedTime(&ms, C.CUevent(start), C.CUevent(end)))
	return float32(ms), err
}

// Module is a loaded code module.
type Module unsafe.Pointer

// Function is a kernel in a module.
type Function unsafe.Pointer

// LoadModule JIT-compiles a NUL-terminated PTX text in the current context.
func LoadModule(ptx string) (Module, error) {
	cs := C.CString(ptx)
	defer C.free(unsafe.Pointer(cs))
	var m C.CUmodule
	err := check("cuModuleLoadData", C.cb_cuModuleLoadData(&m, unsafe.Pointer(cs)))
	return Module(m), err
}

// UnloadModule unloads m.
func UnloadModule(m Module) error { return check("cuModuleUnload", C.cb_cuModuleUnload(C.CUmodule(m))) }

// GetFunction finds a kernel by name.
func GetFunction(m Module, name string) (Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.CUfunction
	err := check("cuModuleGetFunction("+name+")", C.cb_cuModuleGetFunction(&f, C.CUmodule(m), cs))
	return Function(f), err
}

// Launch starts a one-dimensional grid of f on s. Each argument is a kernel
// parameter: int32, uint32, int64, uint64, float64 or DevPtr.
func Launch(f Function, grid, block uint32, s Stream, args ...any) error {
	// One pointer per argument, then each argument in an 8-byte slot.
	mem := C.malloc(C.size_t(16*len(args) + 8))
	defer C.free(mem)
	ptrs := unsafe.Slice((*unsafe.Pointer)(mem), len(args)+1)
	data := unsafe.Add(mem, 8*(len(args)+1))
	off := 0
	for i, a := range args {
		p := unsafe.Add(data, off)
		switch v := a.(type) {
		case int32:
			*(*int32)(p) = v
		case uint32:
			*(*uint32)(p) = v
		case int64:
			*(*int64)(p) = v
		case uint64:
			*(*uint64)(p) = v
		case float64:
			*(*float64)(p) = v
		case DevPtr:
			*(*uint64)(p) = uint64(v)
		default:
			return fmt.Errorf("cuda.Launch: unsupported parameter type %T", a)
		}
		ptrs[i] = p
		off += 8
	}
	return check("cuLaunchKernel", C.cb_cuLaunchKernel(C.CUfunction(f), C.uint(grid), C.uint(block), C.CUstream(s), (*unsafe.Pointer)(mem)))
}

// Graph is an instantiated CUDA graph.
type Graph struct {
	graph C.CUgraph
	exec  C.CUgraphExec
}

// Capture modes.
const (
	CaptureGlobal      = 0
	CaptureThreadLocal = 1
	CaptureRelaxed     = 2
)

// BeginCapture starts capturing s's work into a graph.
func BeginCapture(s Stream, mode int) error {
	return check("cuStreamBeginCapture", C.cb_cuStreamBeginCapture(C.CUstream(s), C.int(mode)))
}

// EndCapture ends the capture and instantiates the graph.
func EndCapture(s Stream) (*Graph, error) {
	g := &Graph{}
	if err := check("cuStreamEndCapture", C.cb_cuStreamEndCapture(C.CUstream(s), &g.graph)); err != nil {
		return nil, err
	}
	if err := check("cuGraphInstantiate", C.cb_cuGraphInstantiate(&g.exec, g.graph)); err != nil {
		C.cb_cuGraphDestroy(g.graph)
		return nil, err
	}
	return g, nil
}

// Launch replays the graph on s.
func (g *Graph) Launch(s Stream) error {
	return check("cuGraphLaunch", C.cb_cuGraphLaunch(g.exec, C.CUstream(s)))
}

// Destroy frees the graph.
func (g *Graph) Destroy() {
	C.cb_cuGraphExecDestroy(g.exec)
	C.cb_cuGraphDestroy(g.graph)
}

// CanCapture returns nil when the driver has stream capture and graphs.
func CanCapture() error {
	if C.cb_can_capture() == 0 {
		return errors.New("this CUDA driver has no stream capture (CUDA graphs need driver 11.4 or newer)")
	}
	return nil
}
