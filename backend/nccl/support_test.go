package nccl

import (
	"strings"
	"testing"

	"collbench/backend/nccl/driver"
	"collbench/dtype"
	"collbench/measure"
)

// TestSupportsByVersionAndGPU checks what each library version and GPU
// generation may run. Without a loaded library (CI) the optional send/recv
// calls are absent, which is checked too.
func TestSupportsByVersionAndGPU(t *testing.T) {
	hopper := []gpu{{index: 0, name: "H100", ccMajor: 9}, {index: 1, name: "H100", ccMajor: 9}}
	ampere := []gpu{{index: 0, name: "A100", ccMajor: 8}}
	cases := []struct {
		version int
		gpus    []gpu
		c       measure.Collective
		t       dtype.DType
		op      measure.ReduceOp
		want    string // "" = supported
	}{
		{22803, hopper, measure.AllReduce, dtype.Float32, measure.Sum, ""},
		{22803, hopper, measure.AllReduce, dtype.BFloat16, measure.Avg, ""},
		{20908, hopper, measure.AllReduce, dtype.BFloat16, measure.Sum, "bfloat16 needs NCCL 2.10"},
		{20908, hopper, measure.AllReduce, dtype.Float32, measure.Avg, "avg needs NCCL 2.10"},
		{22305, hopper, measure.AllGather, dtype.Float8E4M3, measure.NoOp, "f8e4m3 needs NCCL 2.24"},
		{22403, hopper, measure.AllReduce, dtype.Float8E5M2, measure.Sum, ""},
		{22403, ampere, measure.AllReduce, dtype.Float8E5M2, measure.Sum, "compute capability 9.0+; GPU 0 (A100) is 8.0"},
		{22403, ampere, measure.AllGather, dtype.Float8E5M2, measure.NoOp, ""},
		{22803, hopper, measure.AllReduce, dtype.Float8E4M3, measure.Prod, "op prod on dtype f8e4m3"},
		{22803, hopper, measure.ReduceScatter, dtype.Float8E4M3, measure.Avg, "op avg on dtype f8e4m3"},
		{22803, hopper, measure.AllToAll, dtype.Float32, measure.NoOp, "needs ncclSend/ncclRecv"},
	}
	for _, c := range cases {
		b := &Backend{lib: driver.Library{Version: c.version}, devices: c.gpus}
		err := b.Supports(c.c, c.t, c.op)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d %v %v %v: %v", c.version, c.c, c.t, c.op, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d %v %v %v: %v, want %q", c.version, c.c, c.t, c.op, err, c.want)
		}
	}
}

func TestAllToAllFallbackChoice(t *testing.T) {
	if !useNativeAllToAll(true) || useNativeAllToAll(false) {
		t.Fatal("native alltoall only where the library has it")
	}
	forceGroupedAllToAll = true
	defer func() { forceGroupedAllToAll = false }()
	if useNativeAllToAll(true) {
		t.Fatal("forced fallback ignored")
	}
}

func TestLoadLibraryReportsEveryPlace(t *testing.T) {
	_, err := system{}.LoadNCCL([]Candidate{{Path: "/nonexistent/libnccl.so.2", Source: "--nccl-lib"}, {Path: "libnccl-missing.so.9", Source: "dynamic linker"}})
	if err == nil {
		t.Skip("an NCCL library loaded")
	}
	msg := err.Error()
	for _, want := range []string{"libnccl not found; looked in:", "/nonexistent/libnccl.so.2 (--nccl-lib)", "libnccl-missing.so.9 (dynamic linker)", EnvLib} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}
