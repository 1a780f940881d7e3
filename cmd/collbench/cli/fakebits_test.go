package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"collbench/backend/nccl/fakegpu"
	"collbench/determinism"
	"collbench/engine"
)

// TestDeterminismSeesRunAndRankDivergences: on a fake machine whose
// reductions turn their order on every other call and communicator (a
// library reducing with atomics), every cell differs run to run and no
// rank from another; on one whose ranks each sum in their own order, the
// ranks differ and every run repeats. Each is named with its first
// divergence.
func TestDeterminismSeesRunAndRankDivergences(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       fakegpu.Options
		run, ranks string
		line       string
	}{
		{"run to run", fakegpu.Options{OrderByRun: true}, determinism.Differs, determinism.Same, "# first run divergence at"},
		{"ranks", fakegpu.Options{OrderByRank: true}, determinism.Same, determinism.Differs, "# first ranks divergence at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, out, errOut := fakeGPUFactory(4, tc.opts)
			js := filepath.Join(t.TempDir(), "det.json")
			code := run(t, f, "determinism", "--backend", "nccl", "--default-only", "--sizes", "64:4K:x4", "--dtype", "float",
				"--collectives", "allreduce", "-q", "-o", js)
			if code != 0 || !strings.Contains(out.String(), tc.line) {
				t.Fatalf("exit %d, want 0 and %q\n%s\n%s", code, tc.line, out, errOut)
			}
			rep := readJSON[determinism.Report](t, js)
			for _, c := range rep.Cells {
				if c.RunToRun != tc.run || c.Ranks != tc.ranks {
					t.Errorf("%d B %s: run %s, ranks %s; want %s, %s", c.Size, c.Choice, c.RunToRun, c.Ranks, tc.run, tc.ranks)
				}
			}
			if len(rep.Cells) != 4 {
				t.Errorf("%d cells, want 4", len(rep.Cells))
			}
		})
	}
}

// TestBitwiseOnTheFakeGPUMachine runs --bitwise through NCCL's path: the
// clean machine gives the same bits in every run and on every rank; the
// run-to-run plant is named at run 2, the ranks plant at rank 1 against
// rank 0; both fail the run (exit 1) with #wrong 0.
func TestBitwiseOnTheFakeGPUMachine(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts fakegpu.Options
		code int
		want string
	}{
		{"clean", fakegpu.Options{}, 0, "# bitwise:           the same bits in 3 runs of each of 2 halves, run to run and across ranks (OK)"},
		{"run to run", fakegpu.Options{OrderByRun: true}, engine.ExitCheckFailed, "out-of-place: run 2 on rank 0 differs from run 1 from element"},
		{"ranks", fakegpu.Options{OrderByRank: true}, engine.ExitCheckFailed, "out-of-place: rank 1's element 1 is not rank 0's (bits XOR 0x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, out, errOut := fakeGPUFactory(4, tc.opts)
			code := run(t, f, "allreduce", "--backend", "nccl", "--sizes", "4K", "-n", "1", "-w", "0", "--bitwise", "3", "-q")
			if code != tc.code || !strings.Contains(out.String(), tc.want) || !strings.Contains(out.String(), "# wrong elements:    0 (OK)") {
				t.Fatalf("exit %d (want %d), want %q\n%s\n%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
