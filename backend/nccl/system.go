package nccl

import (
	"collbench/backend/nccl/driver"
	"collbench/cuda"
)

// The CUDA half of system: package cuda's calls, one to one.

func (system) Load() error                                    { return cuda.Load() }
func (system) DriverVersion() (int, error)                    { return cuda.DriverVersion() }
func (system) DeviceCount() (int, error)                      { return cuda.DeviceCount() }
func (system) SetCurrent(c cuda.Context) error                { return cuda.SetCurrent(c) }
func (system) MemInfo() (int64, int64, error)                 { return cuda.MemInfo() }
func (system) Alloc(bytes int64) (cuda.DevPtr, error)         { return cuda.Alloc(bytes) }
func (system) Free(p cuda.DevPtr) error                       { return cuda.Free(p) }
func (system) CopyToDevice(dst cuda.DevPtr, src []byte) error { return cuda.CopyToDevice(dst, src) }
func (system) CopyToHost(dst []byte, src cuda.DevPtr) error   { return cuda.CopyToHost(dst, src) }
func (system) NewStream() (cuda.Stream, error)                { return cuda.NewStream(cuda.StreamNonBlocking) }
func (system) DestroyStream(s cuda.Stream) error              { return cuda.DestroyStream(s) }
func (system) Synchronize(s cuda.Stream) error                { return cuda.Synchronize(s) }
func (system) NewEvent() (cuda.Event, error)                  { return cuda.NewEvent() }
func (system) DestroyEvent(e cuda.Event) error                { return cuda.DestroyEvent(e) }
func (system) Record(e cuda.Event, s cuda.Stream) error       { return cuda.Record(e, s) }
func (system) Elapsed(a, b cuda.Event) (float32, error)       { return cuda.Elapsed(a, b) }
func (system) LoadModule(ptx string) (cuda.Module, error)     { return cuda.LoadModule(ptx) }
func (system) UnloadModule(m cuda.Module) error               { return cuda.UnloadModule(m) }
func (system) CanCapture() error                              { return cuda.CanCapture() }

func (system) CopyAsync(dst, src cuda.DevPtr, bytes int64, s cuda.Stream) error {
	return cuda.CopyAsync(dst, src, bytes, s)
}

func (system) MemsetAsync(p cuda.DevPtr, v byte, bytes int64, s cuda.Stream) error {
	return cuda.MemsetAsync(p, v, bytes, s)
}

func (system) GetFunction(m cuda.Module, name string) (cuda.Function, error) {
	return cuda.GetFunction(m, name)
}

func (system) Launch(f cuda.Function, grid, block uint32, s cuda.Stream, args ...any) error {
	return cuda.Launch(f, grid, block, s, args...)
}

func (system) BeginCapture(s cuda.Stream) error { return cuda.BeginCapture(s, cuda.CaptureThreadLocal) }

func (system) EndCapture(s cuda.Stream) (driver.Graph, error) {
	g, err := cuda.EndCapture(s)
	if err != nil {
		return nil, err
	}
	return g, nil
}

func (system) RetainPrimary(index int) (cuda.Context, error) {
	return cuda.Device(index).RetainPrimary()
}
func (system) ReleasePrimary(index int) error { return cuda.Device(index).ReleasePrimary() }

// Device asks the driver for device index's name, bus id, compute
// capability and multiprocessor count; only the name is required.
func (system) Device(index int) (driver.DeviceInfo, error) {
	d := cuda.Device(index)
	var info driver.DeviceInfo
	var err error
	if info.Name, err = d.Name(); err != nil {
		return info, err
	}
	info.BusID, _ = d.PCIBusID()
	info.CCMajor, info.CCMinor, _ = d.ComputeCapability()
	info.SMs, _ = d.Attribute(cuda.AttrMultiprocessors)
	return info, nil
}
