package nccl

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"collbench/backend/nccl/fakegpu"
	"collbench/backend/nccl/profiler"
	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
)

// The profiler plugin, called by the fake machine's NCCL through its
// exported interface (version 5 for 2.28, version 4 for 2.27) exactly as
// NCCL calls it: every row gets its algorithm and every rank's kernel time
// from one recorded operation, and nothing else is recorded.

// recordedSweep runs colls at sizes on n ranks in the given groups.
func recordedSweep(t *testing.T, d *fakegpu.Driver, n int, groups [][]int, colls ...measure.Collective) ([]results.Row, *Backend) {
	t.Helper()
	return recordedSweepAt(t, d, n, groups, []int64{1024, 1 << 20}, colls...)
}

// recordedSweepAt is recordedSweep at the given sizes.
func recordedSweepAt(t *testing.T, d *fakegpu.Driver, n int, groups [][]int, sizes []int64, colls ...measure.Collective) ([]results.Row, *Backend) {
	t.Helper()
	b, err := Open(Options{Driver: d})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Open(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := measure.Plan{Collectives: colls, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
		Sizes: sizes, Iters: 5, Warmup: 2, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{0}}
	cases, err := p.Cases(b, n)
	if err != nil {
		t.Fatal(err)
	}
	rn := &measure.Runner{World: w, Plan: p, Cases: cases}
	if groups != nil {
		rn.Layout = measure.Layout{Groups: groups}
	}
	var notes []string
	rn.OnNote = func(s string) { notes = append(notes, s) }
	rows, err := rn.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) > 0 {
		t.Errorf("notes: %q", notes)
	}
	return rows, b
}

func TestRecordedAlgorithmAndKernelTimes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		want    int
	}{{"interface v6 (NCCL 2.30)", 23007, 6}, {"interface v5 (NCCL 2.28)", 22803, 5}, {"interface v4 (NCCL 2.27)", 22703, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			d := fakegpu.HGX("H100", 4, fakegpu.Options{NCCLVersion: tc.version})
			rows, b := recordedSweep(t, d, 4, nil, measure.AllReduce, measure.AllGather, measure.SendRecv)
			if on, why := b.Records(); !on {
				t.Fatalf("the backend does not record: %s", why)
			}
			if got, want := profiler.Version(), tc.want; got != want {
				t.Errorf("NCCL loaded interface version %d, want %d", got, want)
			}
			for _, row := range rows {
				h := row.OutOfPlace
				k := h.Kernels
				if k == nil || len(k.DurationUS) != 4 {
					t.Fatalf("%s %d: kernel times %+v, want 4 ranks", row.Collective, row.SizeBytes, k)
				}
				for r := range 4 {
					if k.DurationUS[r] < 0 || k.StartUS[r] < 0 || k.Channels[r] < 1 {
						t.Errorf("%s %d rank %d: duration %v start %v channels %d", row.Collective, row.SizeBytes, r, k.DurationUS[r], k.StartUS[r], k.Channels[r])
					}
				}
				if row.InPlace != nil && row.InPlace.Kernels != nil {
					t.Errorf("%s %d: the in-place half was recorded too", row.Collective, row.SizeBytes)
				}
				if row.Collective == "sendrecv" {
					if a := row.Algorithm; a == nil || a.Algo != "P2P" || a.Source != P2PChoice().Source {
						t.Errorf("sendrecv %d: algorithm %v; want P2P, as the probe says (NCCL chooses none for sends and receives)", row.SizeBytes, a)
					}
					continue
				}
				want := "RING/SIMPLE/4ch"
				if row.SizeBytes <= 64<<10 {
					want = "RING/LL/2ch"
					if row.Collective == "allreduce" {
						want = "TREE/LL/2ch"
					}
				}
				if got := row.Algorithm.String(); got != want || row.Algorithm.Source != "NCCL profiler plugin" {
					t.Errorf("%s %d: algorithm %s from %q, want %s from the plugin", row.Collective, row.SizeBytes, got, row.Algorithm.Source, want)
				}
			}
			// One recorded operation per rank and row, and one per rank
			// before the first row (the recorder's set-up, thrown away):
			// the checks, warm-ups and timed loops ran with the plugin
			// disarmed. A send/recv is two operations (a send and a
			// receive) per rank.
			want := int64(4 * (1 + 2 + 2 + 2*2))
			if got := d.ProfiledOps(); got != want {
				t.Errorf("NCCL gave the plugin %d operations, want %d (one per rank and row)", got, want)
			}
		})
	}
}

// An exchange NCCL builds from sends and receives names P2P on every row,
// as the tuning-log probe does: the profiler records no algorithm for it,
// and from p2pRecordLimit up it is not recorded at all (found on 4x H200:
// --explain left every alltoall row without an algorithm).
func TestExchangesNameP2PRecordedOrNot(t *testing.T) {
	d := fakegpu.HGX("H100", 4, fakegpu.Options{})
	rows, _ := recordedSweep(t, d, 4, nil, measure.AllToAll, measure.Gather, measure.SendRecv)
	for _, row := range rows {
		if a := row.Algorithm; a == nil || a.Algo != "P2P" {
			t.Errorf("%s %d: algorithm %v, want P2P", row.Collective, row.SizeBytes, a)
		}
	}
	b, err := Open(Options{Driver: d})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Open(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ex := w.(measure.Explainer)
	big := int64(p2pRecordLimit) * 4
	if why := w.(*world).Recordable(measure.AllToAll, big); why == "" {
		t.Fatalf("alltoall of %d bytes is recorded; the test wants a size beyond the limit", big)
	}
	for _, tc := range []struct {
		c     measure.Collective
		bytes int64
		ranks int
		want  string
	}{
		{measure.AllToAll, big, 4, "P2P"},
		{measure.AllToAllV, 1 << 20, 4, "P2P"},
		{measure.Scatter, 1 << 20, 2, "P2P"},
		{measure.AllToAll, 0, 4, ""},        // nothing moves
		{measure.SendRecv, 1 << 20, 1, ""},  // one rank: a local copy
		{measure.AllReduce, 1 << 20, 4, ""}, // NCCL's own choice: its record tells
		{measure.Broadcast, big, 4, ""},
	} {
		got := ""
		if a := ex.Algorithm(tc.c, tc.bytes, tc.ranks); a != nil {
			got = a.Algo
		}
		if got != tc.want {
			t.Errorf("%s %d bytes on %d ranks: %q, want %q", tc.c, tc.bytes, tc.ranks, got, tc.want)
		}
	}
}

// TestRecorderSetUpAtTheFirstRowThatMovesData: the recorder's set-up
// (one recorded operation per rank, thrown away) and the world's warm-up
// run at the first row that moves data. An allgather of 8 B on 4 ranks is
// empty, and NCCL discards it: set up there, the recorder was not set up
// at all, and on 4x H200 the next row's timed loop ran cold (gather and
// scatter 26-41 us against 11).
func TestRecorderSetUpAtTheFirstRowThatMovesData(t *testing.T) {
	d := fakegpu.HGX("H100", 4, fakegpu.Options{})
	rows, _ := recordedSweepAt(t, d, 4, nil, []int64{8, 1024}, measure.AllGather)
	if rows[0].Count != 0 || rows[1].Count == 0 {
		t.Fatalf("counts %d and %d: the test wants an empty first row", rows[0].Count, rows[1].Count)
	}
	// 4 set-up operations, none for the empty row, 4 for the 1 KiB row.
	if got, want := d.ProfiledOps(), int64(4+0+4); got != want {
		t.Errorf("NCCL gave the plugin %d operations, want %d: the set-up ran where NCCL discards the operation", got, want)
	}
}

func TestRecordedGroupsEachGetTheirOwn(t *testing.T) {
	d := fakegpu.HGX("H100", 4, fakegpu.Options{})
	rows, _ := recordedSweep(t, d, 4, [][]int{{0, 1}, {2, 3}}, measure.AllReduce)
	for _, row := range rows {
		if len(row.Groups) != 2 {
			t.Fatalf("row %d: %d groups", row.SizeBytes, len(row.Groups))
		}
		for _, g := range row.Groups {
			if g.Algorithm == nil || g.Algorithm.Source != "NCCL profiler plugin" {
				t.Errorf("row %d group %d: algorithm %v", row.SizeBytes, g.ID, g.Algorithm)
			}
			if k := g.OutOfPlace.Kernels; k == nil || len(k.DurationUS) != 2 || k.Channels[0] < 1 || k.Channels[1] < 1 {
				t.Errorf("row %d group %d: kernels %+v, want its 2 ranks", row.SizeBytes, g.ID, k)
			}
		}
	}
}

func TestRecordedNetworkSteps(t *testing.T) {
	d := fakegpu.HGX("H100", 4, fakegpu.Options{ProxySteps: true})
	rows, _ := recordedSweep(t, d, 4, nil, measure.SendRecv)
	for _, row := range rows {
		k := row.OutOfPlace.Kernels
		if k == nil || len(k.Net) != 4 {
			t.Fatalf("sendrecv %d: network steps %+v, want 4 ranks", row.SizeBytes, k)
		}
		for r, steps := range k.Net {
			// Each rank sends to the next and receives from the previous.
			next, prev := (r+1)%4, (r+3)%4
			var sent, got bool
			for _, s := range steps {
				sent = sent || (s.Send && s.Peer == next && s.Bytes == row.SizeBytes && s.Steps >= 1)
				got = got || (!s.Send && s.Peer == prev && s.Bytes == row.SizeBytes && s.Steps >= 1)
			}
			if !sent || !got {
				t.Errorf("sendrecv %d rank %d: steps %+v, want a send to %d and a receive from %d of %d bytes", row.SizeBytes, r, steps, next, prev, row.SizeBytes)
			}
		}
	}
}

func TestNoRecorderSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts fakegpu.Options
		env  map[string]string
		want string
	}{
		{"NCCL 2.26", fakegpu.Options{NCCLVersion: 22605}, nil, "predates the profiler interface"},
		{"switched off", fakegpu.Options{}, map[string]string{profiler.EnvSwitch: "off"}, profiler.EnvSwitch + "=off"},
		{"the user's own plugin", fakegpu.Options{}, map[string]string{profiler.EnvPlugin: "/opt/site/libnccl-profiler-site.so"}, "the user's own plugin and is kept"},
		{"NCCL rejects the plugin", fakegpu.Options{RejectProfiler: true}, nil, "NCCL did not load collbench's profiler plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			b := openFake(t, 2, tc.opts)
			w, err := b.Open(context.Background(), 2)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			on, why := w.(measure.Recorder).Recording()
			if on || !strings.Contains(why, tc.want) {
				t.Errorf("recording %v, why %q; want off because %q", on, why, tc.want)
			}
			if v := tc.env[profiler.EnvPlugin]; v != "" && os.Getenv(profiler.EnvPlugin) != v {
				t.Errorf("%s is %q after opening, want the user's %q kept", profiler.EnvPlugin, os.Getenv(profiler.EnvPlugin), v)
			}
			p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce}, DTypes: []dtype.DType{dtype.Float32},
				Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{4096}, Iters: 2, Warmup: 1, Check: 1, OutOfPlace: true, Roots: []int{0}}
			cases, _ := p.Cases(b, 2)
			rows, err := (&measure.Runner{World: w, Plan: p, Cases: cases}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rows[0].Algorithm != nil || rows[0].OutOfPlace.Kernels != nil {
				t.Errorf("a row without a recorder has algorithm %v and kernels %+v", rows[0].Algorithm, rows[0].OutOfPlace.Kernels)
			}
		})
	}
}

// TestRecordedWireTime: a send step's time on the wire is the plugin's
// WireUS, so a slow path shows on the one edge it slows, wherever it is
// planted.
func TestRecordedWireTime(t *testing.T) {
	for _, edge := range [][2]int{{0, 1}, {2, 3}, {3, 0}} {
		t.Run(fmt.Sprintf("%d to %d", edge[0], edge[1]), func(t *testing.T) {
			const delay = 3 * time.Millisecond
			d := fakegpu.HGX("H100", 4, fakegpu.Options{ProxySteps: true, WireDelay: map[[2]int]time.Duration{edge: delay}})
			rows, _ := recordedSweep(t, d, 4, nil, measure.SendRecv)
			for _, row := range rows {
				k := row.OutOfPlace.Kernels
				if k == nil || len(k.Net) != 4 {
					t.Fatalf("sendrecv %d: network steps %+v, want 4 ranks", row.SizeBytes, k)
				}
				for r, steps := range k.Net {
					for _, s := range steps {
						if !s.Send {
							if s.WireUS != 0 {
								t.Errorf("rank %d receive from %d: wire %.0f us, want none", r, s.Peer, s.WireUS)
							}
							continue
						}
						slow := r == edge[0] && s.Peer == edge[1]
						floor := float64(s.Steps) * float64(delay.Microseconds())
						if slow && s.WireUS < floor {
							t.Errorf("rank %d to %d: wire %.0f us over %d steps, want at least %.0f", r, s.Peer, s.WireUS, s.Steps, floor)
						}
						if !slow && s.WireUS >= floor/2 {
							t.Errorf("rank %d to %d: wire %.0f us, as slow as the planted edge %v", r, s.Peer, s.WireUS, edge)
						}
						if s.WireUS > s.BusyUS {
							t.Errorf("rank %d to %d: wire %.0f us above the steps' whole time %.0f", r, s.Peer, s.WireUS, s.BusyUS)
						}
					}
				}
			}
		})
	}
}
