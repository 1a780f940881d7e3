package fakegpu

import (
	"encoding/binary"
	"regexp"
	"strings"
	"unsafe"

	"collbench/backend/nccl/kernels/hostemu"
	"collbench/cuda"
	"collbench/dtype"
)

// module is a loaded PTX module: its kernels and their parameter types.
type module struct {
	entries map[string][]string // kernel → PTX parameter types (.u32, .u64, .f64)
}

type function struct {
	name   string
	params []string
}

var (
	entryRE = regexp.MustCompile(`\.entry\s+(\w+)\s*\(([^)]*)\)`)
	paramRE = regexp.MustCompile(`\.param\s+(\.\w+)\s+\w+`)
)

// LoadModule reads the kernels a PTX text declares, with their parameters.
func (d *Driver) LoadModule(ptx string) (cuda.Module, error) {
	c, err := d.ctx("cuModuleLoadData")
	if err != nil {
		return nil, err
	}
	if d.opts.NoKernels {
		return nil, cudaErrf("cuModuleLoadData", 209, "the fake machine's driver cannot JIT PTX (Options.NoKernels)")
	}
	if err := d.failNow("cuModuleLoadData", c.dev); err != nil {
		return nil, err
	}
	m := &module{entries: map[string][]string{}}
	for _, e := range entryRE.FindAllStringSubmatch(ptx, -1) {
		var params []string
		for _, p := range paramRE.FindAllStringSubmatch(e[2], -1) {
			params = append(params, p[1])
		}
		m.entries[e[1]] = params
	}
	if len(m.entries) == 0 {
		return nil, cudaErrf("cuModuleLoadData", 1, "no kernel in the PTX")
	}
	return cuda.Module(register(d, m)), nil
}

// UnloadModule frees a module.
func (d *Driver) UnloadModule(h cuda.Module) error {
	if _, err := lookup[module](d, "cuModuleUnload", unsafe.Pointer(h)); err != nil {
		return err
	}
	d.release(unsafe.Pointer(h))
	return nil
}

// GetFunction finds a kernel of a module by name.
func (d *Driver) GetFunction(h cuda.Module, name string) (cuda.Function, error) {
	m, err := lookup[module](d, "cuModuleGetFunction", unsafe.Pointer(h))
	if err != nil {
		return nil, err
	}
	params, ok := m.entries[name]
	if !ok {
		return nil, cudaErr("cuModuleGetFunction", 500)
	}
	return cuda.Function(register(d, &function{name: name, params: params})), nil
}

// Launch checks args against the kernel's PTX parameters and enqueues the
// kernel: cb_fill and cb_check run their C code compiled for the host.
func (d *Driver) Launch(h cuda.Function, grid, block uint32, sh cuda.Stream, args ...any) error {
	f, err := lookup[function](d, "cuLaunchKernel", unsafe.Pointer(h))
	if err != nil {
		return err
	}
	s, err := d.streamOf("cuLaunchKernel", sh)
	if err != nil {
		return err
	}
	if grid == 0 || block == 0 || block > 1024 {
		return cudaErrf("cuLaunchKernel", 1, "grid %d, block %d", grid, block)
	}
	if err := checkParams(f, args); err != nil {
		return err
	}
	if err := d.failNow("cuLaunchKernel", s.dev); err != nil {
		return err
	}
	run := func(kernel func([]any) error) func() error {
		return func() error {
			if err := kernel(args); err != nil {
				return err
			}
			if d.clk != nil {
				s.advance(d.clk.kernelTime(s.dev, int64(u64(args[1])))) //nolint:gosec // G115: a count the launch passed
			}
			return nil
		}
	}
	switch f.name {
	case "cb_fill":
		return s.enqueue(run(d.fill))
	case "cb_check":
		return s.enqueue(run(d.check))
	}
	return cudaErrf("cuLaunchKernel", 801, "the fake machine does not run kernel %s", f.name)
}

// checkParams matches each argument's width and kind with the PTX's.
func checkParams(f *function, args []any) error {
	if len(args) != len(f.params) {
		return cudaErrf("cuLaunchKernel", 1, "%s takes %d parameters, the launch passed %d", f.name, len(f.params), len(args))
	}
	for i, a := range args {
		var got string
		switch a.(type) {
		case int32, uint32:
			got = ".u32"
		case int64, uint64, cuda.DevPtr:
			got = ".u64"
		case float64:
			got = ".f64"
		default:
			return cudaErrf("cuLaunchKernel", 1, "%s parameter %d: a %T cannot be passed", f.name, i, a)
		}
		want := f.params[i]
		if strings.HasPrefix(want, ".s") || strings.HasPrefix(want, ".b") {
			want = ".u" + want[2:]
		}
		if got != want {
			return cudaErrf("cuLaunchKernel", 1, "%s parameter %d is %s, the launch passed %T", f.name, i, f.params[i], a)
		}
	}
	return nil
}

// u64 and i32 read a checked parameter of either signedness.
func u64(a any) uint64 {
	switch v := a.(type) {
	case int64:
		return uint64(v) //nolint:gosec // G115: the bits the kernel reads
	case cuda.DevPtr:
		return uint64(v)
	case uint64:
		return v
	}
	return 0
}

func i32(a any) int32 {
	switch v := a.(type) {
	case uint32:
		return int32(v) //nolint:gosec // G115: the bits the kernel reads
	case int32:
		return v
	}
	return 0
}

func i64(a any) int64 { return int64(u64(a)) } //nolint:gosec // G115: the bits the kernel reads

// span is the device memory of count elements of dtype t at p.
func (d *Driver) span(kernel string, p, count uint64, t int32) ([]byte, error) {
	dt := dtype.DType(t)
	if !dt.Valid() {
		return nil, cudaErrf(kernel, 700, "dtype %d does not exist", t)
	}
	buf, _, ok := d.slice(cuda.DevPtr(p), int64(count)*int64(dt.Size())) //nolint:gosec // G115: a count the launch passed
	if !ok {
		return nil, cudaErrf(kernel, 700, "%d elements of %s at %#x overrun their allocation", count, dt, p)
	}
	return buf, nil
}

func (d *Driver) fill(a []any) error {
	buf, err := d.span("cb_fill", u64(a[0]), u64(a[1]), i32(a[2]))
	if err != nil {
		return err
	}
	hostemu.FillArgs(buf, u64(a[1]), i32(a[2]), i32(a[3]), i64(a[4]), i64(a[5]), i32(a[6]), u64(a[7]), i32(a[8]), i32(a[9]))
	return nil
}

func (d *Driver) check(a []any) error {
	buf, err := d.span("cb_check", u64(a[0]), u64(a[1]), i32(a[2]))
	if err != nil {
		return err
	}
	wrong := hostemu.CheckArgs(buf, u64(a[1]), i32(a[2]), i32(a[3]), i32(a[4]), i32(a[5]), i32(a[6]),
		i64(a[7]), i64(a[8]), i64(a[9]), i32(a[10]), i64(a[11]), i64(a[12]), i32(a[13]),
		u64(a[14]), i32(a[15]), a[16].(float64))
	counter, _, ok := d.slice(cuda.DevPtr(u64(a[17])), 8)
	if !ok {
		return cudaErrf("cb_check", 700, "the counter at %#x is not device memory", u64(a[17]))
	}
	binary.LittleEndian.PutUint64(counter, binary.LittleEndian.Uint64(counter)+wrong)
	return nil
}
