package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"collbench/backend/nccl/driver"
	"collbench/backend/nccl/fakegpu"
	"collbench/dtype"
	"collbench/internal/racebuild"
	"collbench/measure"
	"collbench/results"
)

// The backend's handling of what a real machine does wrong, each fault
// planted in the fake machine on several GPUs and watched being handled.

func openFake(t *testing.T, gpus int, opts fakegpu.Options) *Backend {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	b, err := Open(Options{Driver: fakegpu.HGX("H100", gpus, opts)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sweep runs a small verified sweep of colls on n ranks and returns its
// rows and error.
func sweep(t *testing.T, b *Backend, n int, colls ...measure.Collective) ([]results.Row, error) {
	t.Helper()
	w, err := b.Open(context.Background(), n)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	p := measure.Plan{Collectives: colls, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
		Sizes: []int64{1024, 64 << 10}, Iters: 3, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{0}}
	cases, err := p.Cases(b, n)
	if err != nil {
		t.Fatal(err)
	}
	rn := &measure.Runner{World: w, Plan: p, Cases: cases}
	done := make(chan struct{})
	var rows []results.Row
	go func() {
		defer close(done)
		rows, err = rn.Run(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the sweep did not end within 60 s: a hang")
	}
	return rows, err
}

// TestFakeFailedCallIsNamed fails one NCCL call on one GPU after some
// succeed, with a thread per GPU and with one thread issuing for all: the
// sweep ends (the other ranks are aborted, not left waiting) with an error
// naming the call, its result and the rank whose call failed.
func TestFakeFailedCallIsNamed(t *testing.T) {
	for _, tc := range []struct {
		call string
		dev  int
		coll measure.Collective
	}{
		{"ncclAllReduce", 2, measure.AllReduce},
		{"ncclAllReduce", 0, measure.AllReduce},
		{"ncclBroadcast", 3, measure.Broadcast},
		{"ncclSend", 1, measure.SendRecv},
		{"ncclRecv", 3, measure.AllToAllV},
		{"ncclGroupEnd", 2, measure.HyperCube},
	} {
		for _, mode := range measure.ThreadModes() {
			t.Run(fmt.Sprintf("%s@%d/%s", tc.call, tc.dev, mode), func(t *testing.T) {
				b, _ := openMode(t, 4, mode, fakegpu.Options{Faults: []fakegpu.Fault{{Call: tc.call, Device: tc.dev, Skip: 3, Code: driver.SystemError}}})
				_, err := sweep(t, b, 4, tc.coll)
				if err == nil {
					t.Fatal("the sweep passed over a failed call")
				}
				for _, want := range []string{tc.call, "unhandled system error", fmt.Sprintf("rank %d (GPU %d, 0000:", tc.dev, tc.dev)} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
			})
		}
	}
}

// TestFakeFailedCopyInTheHypercubeIsNamed fails the hypercube's own-block
// copy (a step of its one-crossing loop) on one GPU after some succeed, at
// the first and the last GPU, in both thread modes: the sweep ends with
// an error naming the copy, the step of the loop and the rank.
func TestFakeFailedCopyInTheHypercubeIsNamed(t *testing.T) {
	for _, dev := range []int{0, 3} {
		for _, mode := range measure.ThreadModes() {
			b, _ := openMode(t, 4, mode, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "cuMemcpyDtoDAsync", Device: dev, Skip: 3}}})
			_, err := sweep(t, b, 4, measure.HyperCube)
			if err == nil {
				t.Fatalf("GPU %d, %s: the sweep passed over a failed copy", dev, mode)
			}
			for _, want := range []string{"cuMemcpyDtoDAsync", fmt.Sprintf("rank %d (GPU %d, 0000:", dev, dev)} {
				if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("GPU %d, %s: error %q lacks %q", dev, mode, err, want)
				}
			}
		}
	}
}

// TestFakeAsyncErrorIsReported makes a collective succeed on one GPU and
// its communicator then report an error, as NCCL's proxy thread does.
func TestFakeAsyncErrorIsReported(t *testing.T) {
	for _, dev := range []int{0, 3} {
		b := openFake(t, 4, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclReduceScatter", Device: dev, Skip: 2, Code: driver.RemoteError, Async: true}}})
		_, err := sweep(t, b, 4, measure.ReduceScatter)
		if err == nil || !strings.Contains(err.Error(), "asynchronous NCCL error") || !strings.Contains(err.Error(), "remote process exited") ||
			!strings.Contains(err.Error(), fmt.Sprintf("rank %d (GPU %d", dev, dev)) {
			t.Errorf("GPU %d: %v", dev, err)
		}
	}
}

// TestFakeCorruptResultIsCounted makes one GPU's allreduce output wrong in
// one element: every allreduce row counts wrong elements, the other
// collectives none.
func TestFakeCorruptResultIsCounted(t *testing.T) {
	for _, dev := range []int{1, 2} {
		b := openFake(t, 4, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclAllReduce", Device: dev, Corrupt: true}}})
		rows, err := sweep(t, b, 4, measure.AllReduce, measure.AllGather)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			for _, h := range r.Halves() {
				bad := h.Wrong != nil && *h.Wrong > 0
				if bad != (r.Collective == measure.AllReduce.String()) {
					t.Errorf("GPU %d: %s %d bytes: #wrong %v", dev, r.Collective, r.SizeBytes, h.Wrong)
				}
			}
		}
	}
}

// TestFakeHostFallback runs where the driver cannot load the kernels: the
// backend fills and checks through bounded host copies, and a corrupt
// element is still counted.
func TestFakeHostFallback(t *testing.T) {
	b := openFake(t, 2, fakegpu.Options{NoKernels: true, Faults: []fakegpu.Fault{{Call: "ncclAllGather", Device: 1, Corrupt: true}}})
	rows, err := sweep(t, b, 2, measure.AllReduce, measure.AllGather, measure.AllToAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		for _, h := range r.Halves() {
			if bad := h.Wrong == nil || *h.Wrong > 0; bad != (r.Collective == measure.AllGather.String()) {
				t.Errorf("%s %d bytes: #wrong %v", r.Collective, r.SizeBytes, h.Wrong)
			}
		}
	}
}

// TestFakeOlderLibraries runs on the calls older NCCLs have: gather,
// scatter and alltoall through grouped send/recv, groups through new ids
// (no ncclCommSplit), and says what cannot run.
func TestFakeOlderLibraries(t *testing.T) {
	old := driver.Features{SendRecv: true, Abort: true, AsyncErrs: true}
	b := openFake(t, 4, fakegpu.Options{NCCLVersion: 21805, Features: &old})
	if _, err := sweep(t, b, 4, measure.Gather, measure.Scatter, measure.AllToAll, measure.AllReduce); err != nil {
		t.Fatal(err)
	}
	w, err := b.Open(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lvs, err := measure.VerifyGroups(context.Background(), b, w, measure.DefaultLayouts(4, nil), nil,
		measure.VerifyOptions{Sizes: []int64{1000}, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum}})
	if err != nil {
		t.Fatal(err)
	}
	for _, lv := range lvs {
		for _, c := range lv.Collectives {
			if !c.Pass {
				t.Errorf("layout %s %s: %+v", lv.Name, c.Collective, c)
			}
		}
	}
	err = w.Run(func(r measure.Rank) error {
		_, err := r.(*rank).AllocRegistered(4096, false)
		return err
	})
	if !errors.Is(err, measure.ErrUnsupported) || !strings.Contains(err.Error(), "2.19") {
		t.Errorf("registration on NCCL 2.18: %v", err)
	}
}

// TestFakeCommunicatorCreationFails plants a failed ncclCommInitRank.
func TestFakeCommunicatorCreationFails(t *testing.T) {
	for _, dev := range []int{0, 2} {
		b := openFake(t, 4, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclCommInitRank", Device: dev, Code: driver.InternalError}}})
		_, err := b.Open(context.Background(), 4)
		if err == nil || !strings.Contains(err.Error(), "creating the NCCL communicators: ncclCommInitRank: internal error") {
			t.Errorf("GPU %d: %v", dev, err)
		}
	}
}

// TestFakeRegisteredBuffersOutOfMemory plants an out-of-memory
// ncclMemAlloc behind -R: the row's error says what was asked for.
func TestFakeRegisteredBuffersOutOfMemory(t *testing.T) {
	b := openFake(t, 2, fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclMemAlloc", Device: 1, Code: driver.UnhandledCudaError}}})
	w, err := b.Open(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Run(func(sr measure.Rank) error {
		r := sr.(*rank)
		buf, err := r.AllocRegistered(1<<20, true)
		if err != nil {
			return err
		}
		return r.Free(buf)
	})
	if err == nil || !strings.Contains(err.Error(), "ncclMemAlloc of 1.0 MiB") || !strings.Contains(err.Error(), "rank 1 (GPU 1, 0000:2a:00.0)") {
		t.Errorf("got %v", err)
	}
}

// TestFakeSymmetricWindows registers windows on every rank (a collective
// call) and frees them: the fake refuses ncclMemFree of a buffer still
// registered, so the order is checked too.
func TestFakeSymmetricWindows(t *testing.T) {
	b := openFake(t, 4, fakegpu.Options{})
	w, err := b.Open(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Run(func(sr measure.Rank) error {
		r := sr.(*rank)
		for i := 0; i < 3; i++ {
			buf, err := r.AllocRegistered(64<<10, i%2 == 0)
			if err != nil {
				return err
			}
			if err := r.Free(buf); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFakeTimedRepetitionsMissTheCache: a GPU's L2 cache holds a buffer
// that the last collective used, so a benchmark that repeats a collective
// on the same buffers times a size that fits in the cache from it (on 2x
// H200 collbench's scatter of 16 MiB came out 6% faster than NCCL's
// benchmark's, which moves its buffers between repetitions). On a modelled
// machine whose cache holds 4 MiB and serves from it at 0.8 of the time,
// the warm-up and timed repetitions move through the buffers: a size that
// fits (1 MiB, with 8 MiB of room) is timed at the rate of one that does
// not (8 MiB), with a thread per GPU and with one thread for all.
func TestFakeTimedRepetitionsMissTheCache(t *testing.T) {
	racebuild.SkipLongModelRun(t) // 18 s under -race, 0.8 s without
	for _, mode := range measure.ThreadModes() {
		m := fakegpu.HealthyModel(3)
		m.LinkSpread, m.CopySpread, m.FillSpread = 0, 0, 0
		m.CacheBytes, m.CachedFactor = 4<<20, 0.8
		b, _ := openMode(t, 2, mode, fakegpu.Options{Model: m})
		w, err := b.Open(context.Background(), 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, coll := range []measure.Collective{measure.AllReduce, measure.Scatter} {
			p := measure.Plan{Collectives: []measure.Collective{coll}, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
				Sizes: []int64{1 << 20, 8 << 20}, Iters: 20, Warmup: 2, Check: 1, OutOfPlace: true, Roots: []int{0}}
			cases, err := p.Cases(b, 2)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := (&measure.Runner{World: w, Plan: p, Cases: cases}).Run(context.Background())
			if err != nil || len(rows) != 2 {
				t.Fatalf("%s %s: %d rows, %v", mode, coll, len(rows), err)
			}
			small, large := rows[0].OutOfPlace.BusBW, rows[1].OutOfPlace.BusBW
			if d := small/large - 1; d > 0.02 || d < -0.02 {
				t.Errorf("%s %s: busbw %.1f GB/s at 1 MiB against %.1f at 8 MiB (%+.1f%%): the small size was timed from the cache", mode, coll, small, large, 100*d)
			}
		}
		w.Close()
	}
}

// TestFakeBuffersComeFromNCCLsAllocator: a run's buffers come from
// ncclMemAlloc, as NCCL's benchmark (2.19 and newer) allocates them, where
// the loaded NCCL has it; from cuMemAlloc with NCCL 2.18, or on a GPU where
// ncclMemAlloc fails. Every row verifies, and every buffer is freed by its
// own allocator's call (the fake refuses the other).
func TestFakeBuffersComeFromNCCLsAllocator(t *testing.T) {
	nccl218 := &driver.Features{SendRecv: true, AllToAll: true, Split: true, Gather: true, Abort: true}
	for _, tc := range []struct {
		name string
		opts fakegpu.Options
		want []string // the allocator of each rank's buffers
	}{
		{"NCCL with ncclMemAlloc", fakegpu.Options{}, []string{"ncclMemAlloc", "ncclMemAlloc"}},
		{"NCCL 2.18", fakegpu.Options{Features: nccl218}, []string{"cuMemAlloc", "cuMemAlloc"}},
		{"ncclMemAlloc fails on GPU 1", fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclMemAlloc", Device: 1, Code: driver.UnhandledCudaError}}},
			[]string{"ncclMemAlloc", "cuMemAlloc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Timeout = 10 * time.Second
			drv := fakegpu.HGX("H100", 2, tc.opts)
			b, err := Open(Options{Driver: drv})
			if err != nil {
				t.Fatal(err)
			}
			rows, err := sweep(t, b, 2, measure.AllReduce, measure.AllGather)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) == 0 {
				t.Fatal("no rows")
			}
			for _, r := range rows {
				for _, h := range r.Halves() {
					if h.Wrong == nil || *h.Wrong != 0 {
						t.Errorf("%s %d bytes: #wrong %v", r.Collective, r.SizeBytes, h.Wrong)
					}
				}
			}
			w, err := b.Open(context.Background(), 2)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			got := make([]string, 2)
			err = w.Run(func(r measure.Rank) error {
				buf, err := r.Alloc(1 << 20)
				if err != nil {
					return err
				}
				got[r.Rank()] = drv.AllocatedBy(buf.(*devBuf).ptr)
				return r.Free(buf)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("the ranks' buffers came from %v, want %v", got, tc.want)
			}
		})
	}
}
