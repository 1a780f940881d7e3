#!/usr/bin/env python3
"""copylat: the latency of a 4-byte device-to-host copy on one GPU, over time.

Loads libcuda with ctypes, makes a context on the GPU given, and for SECONDS
copies 4 bytes from device memory to pinned host memory with a synchronous
cuMemcpyDtoH, printing "elapsed_ms latency_us" per copy. The copy crosses the
host-GPU path twice (the CPU starts it, the GPU writes the result back), so
stretches of slow copies show that path slowing down, not the CPU.
Usage: copylat.py GPU SECONDS"""
import ctypes, sys, time

def main():
    try:
        gpu, secs = int(sys.argv[1]), float(sys.argv[2])
    except (IndexError, ValueError):
        print("usage: copylat.py GPU SECONDS (a GPU index and a duration, e.g. copylat.py 0 3)", file=sys.stderr)
        sys.exit(2)
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        sys.exit(f"copylat: cannot load the CUDA driver ({e}): run it on a machine with an NVIDIA GPU and driver")
    def ck(r, what):
        if r != 0:
            sys.exit(f"{what} failed: CUDA error {r}")
    ck(cu.cuInit(0), "cuInit")
    dev, ctx, dptr, host = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p()
    ck(cu.cuDeviceGet(ctypes.byref(dev), gpu), "cuDeviceGet")
    ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    ck(cu.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(4096)), "cuMemAlloc")
    ck(cu.cuMemAllocHost_v2(ctypes.byref(host), ctypes.c_size_t(4096)), "cuMemAllocHost")
    copy = cu.cuMemcpyDtoH_v2
    copy.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    out, clock = [], time.perf_counter_ns
    start = clock()
    end = start + int(secs * 1e9)
    while True:
        t0 = clock()
        if t0 > end:
            break
        copy(host, dptr, 4)
        out.append(f"{(t0 - start) / 1e6:.2f} {(clock() - t0) / 1e3:.2f}")
    print("\n".join(out))

main()
