package nccl

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"collbench/backend/nccl/fakegpu"
	"collbench/topology"
)

func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		local   string
		allowed []int
		want    string
	}{
		{"0-3", []int{0, 1, 2, 3, 4, 5, 6, 7}, "0-3"},
		{"4-7", []int{2, 3, 4, 5}, "4-5"},
		{"4-7", []int{0, 1}, ""}, // bound elsewhere by a launcher
		{"", []int{0, 1}, ""},    // sysfs does not say
		{"x", []int{0, 1}, ""},
	} {
		if got := topology.FormatCPUList(placement(tc.local, tc.allowed)); got != tc.want {
			t.Errorf("%q within %v: %q, want %q", tc.local, tc.allowed, got, tc.want)
		}
	}
	for in, want := range map[string]string{"00000000:1A:00.0": "0000:1a:00.0", "0000:18:00.0": "0000:18:00.0"} {
		if got := sysBus(in); got != want {
			t.Errorf("sysBus(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestThreadsPlacedNearTheirGPU gives the fake machine's GPUs a sysfs that
// places GPU 0 on this process's first CPU and says nothing of GPU 1: GPU
// 0's thread is bound there (the kernel says so) and the rank's device
// records it; GPU 1's thread keeps the process's CPUs.
func TestThreadsPlacedNearTheirGPU(t *testing.T) {
	allowed := allowedCPUs()
	if len(allowed) < 2 {
		t.Skip("this process may run on one CPU only: binding changes nothing")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "sys/bus/pci/devices/0000:18:00.0")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "local_cpulist"), []byte(strconv.Itoa(allowed[0])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Open(Options{Driver: fakegpu.HGX("H100", 2, fakegpu.Options{Timeout: 10 * time.Second}), SysRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Open(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws := w.(*world)
	for i, want := range []string{strconv.Itoa(allowed[0]), topology.FormatCPUList(allowed)} {
		r := ws.ranks[i]
		var got []int
		_ = r.wk.do(func() error { got = allowedCPUs(); return nil })
		if s := topology.FormatCPUList(got); s != want {
			t.Errorf("GPU %d's thread runs on CPUs %s, want %s", i, s, want)
		}
	}
	if d := ws.ranks[0].Device(); d.CPUs != strconv.Itoa(allowed[0]) {
		t.Errorf("GPU 0's device records CPUs %q", d.CPUs)
	}
	if d := ws.ranks[1].Device(); d.CPUs != "" {
		t.Errorf("GPU 1's device records CPUs %q, want none", d.CPUs)
	}
}
