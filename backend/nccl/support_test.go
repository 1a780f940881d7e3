package nccl

import (
	"strings"
	"testing"

	"collbench/dtype"
	"collbench/backend/nccl/driver"
	"collbench/suites"
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
		c       suites.Collective
		t       dtype.DType
		op      suites.ReduceOp
		want    string // "" = supported
	}{
		{22803, hopper, suites.AllReduce, dtype.Float32, suites.Sum, ""},
		{22803, hopper, suites.AllReduce, dtype.BFloat16, suites.Avg, ""},
		{20908, hopper, suites.AllReduce, dtype.BFloat16, suites.Sum, "bfloat16 needs NCCL 2.10"},
		{20908, hopper, suites.AllReduce, dtype.Float32, suites.Avg, "avg needs NCCL 2.10"},
		{22305, hopper, suites.AllGather, dtype.Float8E4M3, suites.NoOp, "f8e4m3 needs NCCL 2.24"},
		{22403, hopper, suites.AllReduce, dtype.Float8E5M2, suites.Sum, ""},
		{22403, ampere, suites.AllReduce, dtype.Float8E5M2, suites.Sum, "compute capability 9.0+; GPU 0 (A100) is 8.0"},
		{22403, ampere, suites.AllGather, dtype.Float8E5M2, suites.NoOp, ""},
		{22803, hopper, suites.AllReduce, dtype.Float8E4M3, suites.Prod, "op prod on dtype f8e4m3"},
		{22803, hopper, suites.ReduceScatter, dtype.Float8E4M3, suites.Avg, "op avg on dtype f8e4m3"},
		{22803, hopper, suites.AllToAll, dtype.Float32, suites.NoOp, "needs ncclSend/ncclRecv"},
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
