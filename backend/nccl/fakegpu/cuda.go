package fakegpu

import (
	"time"
	"unsafe"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
)

// contextBytes is what a context takes of a GPU's memory on creation.
const contextBytes = 64 << 20

// Load initialises the driver: a machine with no GPUs fails as cuInit does.
func (d *Driver) Load() error {
	if len(d.m.GPUs) == 0 {
		return cudaErr("cuInit", 100)
	}
	d.mu.Lock()
	d.loaded = true
	d.mu.Unlock()
	return nil
}

// DriverVersion is the machine's CUDA driver version.
func (d *Driver) DriverVersion() (int, error) { return orInt(d.m.CUDA, 13000), nil }

// DeviceCount is the number of GPUs.
func (d *Driver) DeviceCount() (int, error) { return len(d.m.GPUs), nil }

// Device describes GPU index from the machine.
func (d *Driver) Device(index int) (driver.DeviceInfo, error) {
	if index < 0 || index >= len(d.m.GPUs) {
		return driver.DeviceInfo{}, cudaErr("cuDeviceGet", 101)
	}
	g := d.m.GPUs[index]
	return driver.DeviceInfo{Name: g.Name, BusID: "0000:" + g.Bus, CCMajor: g.CCMajor, CCMinor: g.CCMinor, SMs: max(g.Cores/128, 1)}, nil
}

// RetainPrimary returns GPU index's primary context.
func (d *Driver) RetainPrimary(index int) (cuda.Context, error) {
	if index < 0 || index >= len(d.m.GPUs) {
		return nil, cudaErr("cuDevicePrimaryCtxRetain", 101)
	}
	if err := d.failNow("cuDevicePrimaryCtxRetain", index); err != nil {
		return nil, err
	}
	c := d.contexts[index]
	d.mu.Lock()
	if c.retained == 0 {
		d.mem.used[index] += contextBytes
	}
	c.retained++
	d.mu.Unlock()
	return cuda.Context(register(d, c)), nil
}

// ReleasePrimary releases GPU index's primary context.
func (d *Driver) ReleasePrimary(index int) error {
	if index < 0 || index >= len(d.m.GPUs) {
		return cudaErr("cuDevicePrimaryCtxRelease", 101)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.contexts[index]
	if c.retained == 0 {
		return cudaErrf("cuDevicePrimaryCtxRelease", 201, "GPU %d's primary context was not retained", index)
	}
	if c.retained--; c.retained == 0 {
		d.mem.used[index] -= contextBytes
	}
	return nil
}

// SetCurrent makes c the calling thread's context.
func (d *Driver) SetCurrent(c cuda.Context) error {
	ctx, err := lookup[context](d, "cuCtxSetCurrent", unsafe.Pointer(c))
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.current[thread()] = ctx
	d.mu.Unlock()
	return nil
}

// MemInfo is the current GPU's free and total memory.
func (d *Driver) MemInfo() (int64, int64, error) {
	c, err := d.ctx("cuMemGetInfo")
	if err != nil {
		return 0, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts.MemoryBytes - d.mem.used[c.dev], d.opts.MemoryBytes, nil
}

// allocate takes bytes on the current GPU.
func (d *Driver) allocate(call string, bytes int64, nccl bool) (cuda.DevPtr, error) {
	c, err := d.ctx(call)
	if err != nil {
		return 0, err
	}
	if err := d.failNow(call, c.dev); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if bytes <= 0 {
		return 0, cudaErr(call, 1)
	}
	if bytes > d.opts.MemoryBytes-d.mem.used[c.dev] {
		if nccl {
			return 0, ncclErr(call, driver.UnhandledCudaError, "cuMemCreate: out of memory")
		}
		return 0, cudaErr(call, 2)
	}
	return d.mem.add(c.dev, bytes, nccl).base, nil
}

// AllocatedBy names the call that allocated the live memory at p:
// "ncclMemAlloc", "cuMemAlloc", or "" where p is in no allocation.
func (d *Driver) AllocatedBy(p cuda.DevPtr) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch a := d.mem.find(p); {
	case a == nil:
		return ""
	case a.nccl:
		return "ncclMemAlloc"
	default:
		return "cuMemAlloc"
	}
}

// Alloc allocates device memory on the current GPU.
func (d *Driver) Alloc(bytes int64) (cuda.DevPtr, error) {
	return d.allocate("cuMemAlloc", bytes, false)
}

// Free frees memory from Alloc.
func (d *Driver) Free(p cuda.DevPtr) error { return d.free("cuMemFree", p, false) }

func (d *Driver) free(call string, p cuda.DevPtr, nccl bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.mem.find(p)
	switch {
	case a == nil || a.base != p:
		return cudaErrf(call, 1, "%#x is not the start of an allocation", uint64(p))
	case a.nccl != nccl && nccl:
		return ncclErr(call, driver.InvalidArgument, "memory not from ncclMemAlloc")
	case a.nccl != nccl:
		return cudaErrf(call, 1, "memory from ncclMemAlloc is freed with ncclMemFree")
	case a.regs > 0 && nccl:
		return ncclErr(call, driver.InvalidUsage, "buffer still registered with a communicator")
	}
	d.mem.remove(a)
	return nil
}

// CopyToDevice copies src to dst synchronously.
func (d *Driver) CopyToDevice(dst cuda.DevPtr, src []byte) error {
	buf, _, ok := d.slice(dst, int64(len(src)))
	if !ok {
		return cudaErr("cuMemcpyHtoD", 1)
	}
	copy(buf, src)
	return nil
}

// CopyToHost copies device memory at src to dst synchronously.
func (d *Driver) CopyToHost(dst []byte, src cuda.DevPtr) error {
	buf, _, ok := d.slice(src, int64(len(dst)))
	if !ok {
		return cudaErr("cuMemcpyDtoH", 1)
	}
	copy(dst, buf)
	return nil
}

// NewStream creates a stream on the current GPU.
func (d *Driver) NewStream() (cuda.Stream, error) {
	c, err := d.ctx("cuStreamCreate")
	if err != nil {
		return nil, err
	}
	s := newStream(d, c.dev)
	return cuda.Stream(register(d, s)), nil
}

// DestroyStream waits for s's work, then ends it.
func (d *Driver) DestroyStream(h cuda.Stream) error {
	s, err := lookup[stream](d, "cuStreamDestroy", unsafe.Pointer(h))
	if err != nil {
		return err
	}
	d.release(unsafe.Pointer(h))
	s.stop()
	return nil
}

func (d *Driver) streamOf(call string, h cuda.Stream) (*stream, error) {
	return lookup[stream](d, call, unsafe.Pointer(h))
}

// CopyAsync enqueues a device-to-device copy.
func (d *Driver) CopyAsync(dst, src cuda.DevPtr, bytes int64, h cuda.Stream) error {
	d.cross("CopyAsync")
	return d.copyAsync(dst, src, bytes, h)
}

// copyAsync is CopyAsync inside a call already counted.
func (d *Driver) copyAsync(dst, src cuda.DevPtr, bytes int64, h cuda.Stream) error {
	s, err := d.streamOf("cuMemcpyDtoDAsync", h)
	if err != nil {
		return err
	}
	if err := d.failNow("cuMemcpyDtoDAsync", s.dev); err != nil {
		return err
	}
	return s.enqueue(func() error {
		from, _, ok1 := d.slice(src, bytes)
		to, _, ok2 := d.slice(dst, bytes)
		if !ok1 || !ok2 {
			return cudaErr("cuMemcpyDtoDAsync", 700)
		}
		copy(to, from)
		if d.clk != nil {
			s.advance(d.clk.copyTime(s.dev, bytes))
		}
		return nil
	})
}

// MemsetAsync enqueues setting bytes at p to v.
func (d *Driver) MemsetAsync(p cuda.DevPtr, v byte, bytes int64, h cuda.Stream) error {
	d.cross("MemsetAsync")
	s, err := d.streamOf("cuMemsetD8Async", h)
	if err != nil {
		return err
	}
	if _, _, ok := d.slice(p, bytes); !ok {
		return cudaErr("cuMemsetD8Async", 1)
	}
	return s.enqueue(func() error {
		buf, _, ok := d.slice(p, bytes)
		if !ok {
			return cudaErr("cuMemsetD8Async", 700)
		}
		for i := range buf {
			buf[i] = v
		}
		if d.clk != nil {
			s.advance(d.clk.copyTime(s.dev, bytes/2)) // written only
		}
		return nil
	})
}

// Synchronize waits for s's work and returns its first error.
func (d *Driver) Synchronize(h cuda.Stream) error {
	d.cross("Synchronize")
	s, err := d.streamOf("cuStreamSynchronize", h)
	if err != nil {
		return err
	}
	if err := d.failNow("cuStreamSynchronize", s.dev); err != nil {
		return err
	}
	return s.wait()
}

type event struct {
	at       time.Time
	vt       float64 // the stream's virtual time in seconds, under a Model
	recorded bool
}

// NewEvent creates an event.
func (d *Driver) NewEvent() (cuda.Event, error) {
	if _, err := d.ctx("cuEventCreate"); err != nil {
		return nil, err
	}
	return cuda.Event(register(d, &event{})), nil
}

// DestroyEvent frees an event.
func (d *Driver) DestroyEvent(h cuda.Event) error {
	if _, err := lookup[event](d, "cuEventDestroy", unsafe.Pointer(h)); err != nil {
		return err
	}
	d.release(unsafe.Pointer(h))
	return nil
}

// Record enqueues taking the time into e.
func (d *Driver) Record(h cuda.Event, sh cuda.Stream) error {
	d.cross("Record")
	e, err := lookup[event](d, "cuEventRecord", unsafe.Pointer(h))
	if err != nil {
		return err
	}
	s, err := d.streamOf("cuEventRecord", sh)
	if err != nil {
		return err
	}
	d.mu.Lock()
	e.recorded = false
	d.mu.Unlock()
	return s.enqueue(func() error {
		d.mu.Lock()
		if d.clk != nil {
			s.vt = d.clk.reach(s.dev, s.vt)
		}
		e.at, e.vt, e.recorded = time.Now(), s.vt, true
		d.mu.Unlock()
		return nil
	})
}

// HostDelay delays the stream's later work by d under a Model: the host
// issued nothing for d (driver.HostDelayer).
func (d *Driver) HostDelay(sh cuda.Stream, dur time.Duration) error {
	d.cross("HostDelay")
	s, err := d.streamOf("hostDelay", sh)
	if err != nil {
		return err
	}
	return s.enqueue(func() error {
		d.mu.Lock()
		if d.clk != nil {
			s.vt += dur.Seconds()
		}
		d.mu.Unlock()
		return nil
	})
}

// Elapsed is the time between two recorded events, in ms.
func (d *Driver) Elapsed(start, end cuda.Event) (float32, error) {
	d.cross("Elapsed")
	a, err := lookup[event](d, "cuEventElapsedTime", unsafe.Pointer(start))
	if err != nil {
		return 0, err
	}
	b, err := lookup[event](d, "cuEventElapsedTime", unsafe.Pointer(end))
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !a.recorded || !b.recorded {
		return 0, cudaErr("cuEventElapsedTime", 600)
	}
	if d.clk != nil {
		return float32((b.vt - a.vt) * 1e3), nil
	}
	return float32(b.at.Sub(a.at).Seconds() * 1e3), nil
}

// CanCapture says whether the driver has stream capture.
func (d *Driver) CanCapture() error {
	if d.opts.NoCapture {
		return cudaErr("cuStreamBeginCapture", 801)
	}
	return nil
}

// BeginCapture starts recording s's work instead of running it.
func (d *Driver) BeginCapture(h cuda.Stream) error {
	if err := d.CanCapture(); err != nil {
		return err
	}
	s, err := d.streamOf("cuStreamBeginCapture", h)
	if err != nil {
		return err
	}
	return s.beginCapture()
}

// EndCapture ends the recording and returns it as a graph.
func (d *Driver) EndCapture(h cuda.Stream) (driver.Graph, error) {
	s, err := d.streamOf("cuStreamEndCapture", h)
	if err != nil {
		return nil, err
	}
	ops, err := s.endCapture()
	if err != nil {
		return nil, err
	}
	return &graph{d: d, ops: ops}, nil
}

type graph struct {
	d    *Driver
	ops  []func() error
	gone bool
}

// Launch enqueues the graph's work on s.
func (g *graph) Launch(h cuda.Stream) error {
	if g.gone {
		return cudaErr("cuGraphLaunch", 400)
	}
	s, err := g.d.streamOf("cuGraphLaunch", h)
	if err != nil {
		return err
	}
	for _, op := range g.ops {
		if err := s.enqueue(op); err != nil {
			return err
		}
	}
	return nil
}

// Destroy frees the graph.
func (g *graph) Destroy() { g.gone = true }
