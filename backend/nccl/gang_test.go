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
	"collbench/internal/syncx"
	"collbench/measure"
)

// The two issuing modes (--threads) on the fake machine: every collective
// verified in both, the threads that issued counted by the machine, faults
// named by their GPU, groups of ranks each with its own issuing thread.

func openMode(t *testing.T, gpus int, mode string, opts fakegpu.Options) (*Backend, *fakegpu.Driver) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	m := fakegpu.HGX("H100", gpus, opts)
	b, err := Open(Options{Driver: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetThreads(mode); err != nil {
		t.Fatal(err)
	}
	return b, m
}

// TestThreadModesIssuers sweeps every collective in both modes: each is
// verified, and the machine saw one thread issue for every GPU in one mode
// and a thread per GPU in the other.
func TestThreadModesIssuers(t *testing.T) {
	for _, mode := range measure.ThreadModes() {
		t.Run(mode, func(t *testing.T) {
			b, m := openMode(t, 4, mode, fakegpu.Options{})
			rows, err := sweep(t, b, 4, measure.AllCollectives()...)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, rows)
			threads := map[int]bool{}
			issuers := m.Issuers()
			for dev := 0; dev < 4; dev++ {
				for _, tid := range issuers[dev] {
					threads[tid] = true
				}
				if len(issuers[dev]) != 1 {
					t.Errorf("GPU %d: issued from threads %v, want one", dev, issuers[dev])
				}
			}
			want := map[string]int{measure.ThreadsOne: 1, measure.ThreadsPerGPU: 4}[mode]
			if len(threads) != want {
				t.Errorf("%d threads issued for the 4 GPUs (%v), want %d", len(threads), issuers, want)
			}
		})
	}
}

// TestOneThreadFeatures runs the timed loop's other paths in one mode:
// groups of operations (-m), blocking, CUDA graphs and per-iteration
// timing, each verified.
func TestOneThreadFeatures(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(p *measure.Plan)
	}{
		{"agg", func(p *measure.Plan) { p.Agg = 3 }},
		{"blocking", func(p *measure.Plan) { p.Blocking = 1 }},
		{"graph", func(p *measure.Plan) { p.GraphReplays = 2 }},
		{"iter-stats", func(p *measure.Plan) { p.IterStats = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := openMode(t, 3, measure.ThreadsOne, fakegpu.Options{})
			p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce, measure.AllToAllV, measure.SendRecv},
				DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
				Sizes: []int64{1024}, Iters: 3, Warmup: 1, Check: 1, OutOfPlace: true, Roots: []int{0}}
			tc.set(&p)
			runOn(t, b, 3, p)
		})
	}
}

// TestOneThreadGroups splits four GPUs into groups of unequal size: each
// group's local ranks form their own gang, and every row verifies.
func TestOneThreadGroups(t *testing.T) {
	for _, groups := range [][][]int{{{1, 2, 3}, {0}}, {{0, 2}, {1, 3}}} {
		t.Run(fmt.Sprint(groups), func(t *testing.T) {
			b, m := openMode(t, 4, measure.ThreadsOne, fakegpu.Options{})
			w, err := b.Open(context.Background(), 4)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce, measure.AllToAllV, measure.Broadcast},
				DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
				Sizes: []int64{4096}, Iters: 2, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{0}}
			runIn(t, b, w, 2, p, measure.Layout{Groups: groups})
			// One thread per group: its first rank's.
			issuers := m.Issuers()
			for _, g := range groups {
				for _, dev := range g {
					if len(issuers[dev]) != 1 || !slices.Equal(issuers[dev], issuers[g[0]]) {
						t.Errorf("GPU %d issued from %v, its group's first GPU %d from %v", dev, issuers[dev], g[0], issuers[g[0]])
					}
				}
			}
		})
	}
}

// TestGangErrors checks who returns what from a failed step: the failed
// part's rank its error, the others an abandonment naming it; a failed
// group the leader, naming every GPU it issued for.
func TestGangErrors(t *testing.T) {
	ranks := []*rank{{worldRank: 0, dev: gpu{index: 0, busID: "0000:18:00.0"}}, {worldRank: 1, dev: gpu{index: 1, busID: "0000:2a:00.0"}},
		{worldRank: 2, dev: gpu{index: 2, busID: "0000:3a:00.0"}}}
	g := newGang(nil, ranks)
	cause := errors.New("ncclAllReduce: unhandled system error")
	g.err = &driver.PartError{Part: 1, Err: cause}
	if err := g.errFor(1); !errors.Is(err, cause) {
		t.Errorf("the failed part's rank got %v", err)
	}
	for _, i := range []int{0, 2} {
		if err := g.errFor(i); !errors.Is(err, syncx.ErrAborted) || !strings.Contains(err.Error(), "rank 1 (GPU 1, 0000:2a:00.0) failed") {
			t.Errorf("rank %d got %v", i, err)
		}
	}
	g.err = &driver.PartError{Part: -1, Err: errors.New("ncclGroupEnd: internal error")}
	if err := g.errFor(0); err == nil || errors.Is(err, syncx.ErrAborted) || !strings.Contains(err.Error(), "one thread issuing for GPUs 0, 1, 2") {
		t.Errorf("leader got %v", err)
	}
	if err := g.errFor(2); !errors.Is(err, syncx.ErrAborted) {
		t.Errorf("rank 2 got %v", err)
	}
}

func TestSetThreads(t *testing.T) {
	b, _ := openMode(t, 2, "", fakegpu.Options{})
	if b.Threads() != measure.ThreadsPerGPU {
		t.Errorf("default %q", b.Threads())
	}
	if err := b.SetThreads("two"); err == nil || !strings.Contains(err.Error(), `invalid --threads "two" (valid: per-gpu, one)`) {
		t.Errorf("bad mode: %v", err)
	}
}

// TestGPUThreadModes verifies every collective in both issuing modes, with
// groups of operations and blocking, on every GPU count the machine has.
// With one GPU, the one-thread mode is forced through its gang (a gang of
// one), so that its groups run on a real NCCL wherever a GPU is.
func TestGPUThreadModes(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		for _, mode := range measure.ThreadModes() {
			for _, n := range rankCounts(b) {
				t.Run(fmt.Sprintf("%s/ranks=%d", mode, n), func(t *testing.T) {
					if err := b.SetThreads(mode); err != nil {
						t.Fatal(err)
					}
					w, err := b.Open(context.Background(), n)
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					ws := w.(*world)
					if mode == measure.ThreadsOne && n == 1 {
						ws.gangs = append(ws.gangs, newGang(b.drv, ws.ranks))
					}
					if (mode == measure.ThreadsOne) != (ws.ranks[0].gang != nil) {
						t.Fatalf("mode %s: gang %v", mode, ws.ranks[0].gang)
					}
					for _, set := range []func(*measure.Plan){func(*measure.Plan) {}, func(p *measure.Plan) { p.Agg = 3 }, func(p *measure.Plan) { p.Blocking = 1 }} {
						p := measure.Plan{Collectives: measure.AllCollectives(), DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
							Sizes: big(b, 8, 4096, 1<<20), Iters: 5, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{n - 1}, SkipUnsupported: true}
						set(&p)
						runIn(t, b, w, n, p, measure.Layout{})
					}
				})
			}
		}
	})
}
