package engine

import (
	"strings"
	"testing"

	"collbench/internal/faults"
)

// TestFaultsABackendLeavesOutAreRefused: every backend, in one process and
// with a process per rank, refuses the kinds it would not plant (the run
// would pass as healthy) with one line naming them, and takes the rest.
func TestFaultsABackendLeavesOutAreRefused(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		backend string
		multi   bool
		refused string // "" when taken
	}{
		{"slow-link:0-1:20MB/s", "mpi", true, "the mpi backend with a process per rank does not plant slow-link (it plants hang, kill, stop, probe-hang, probe-exit, probe-drop)"},
		{"hang:1;late-rank:2:1ms;corrupt:3", "mpi", true, "does not plant late-rank, corrupt ("},
		{"hang:1@40;kill:2;stop:3;probe-exit:0", "mpi", true, ""},
		{"delay-link:0-1:5ms", "cpu", false, "in one process does not plant delay-link (it plants hang, corrupt, slow-rank, slow-host, probe-hang, probe-exit, probe-drop); run a process per rank (collbench launch -n N) to plant it"},
		{"kill:1", "cpu", false, "does not plant kill"},
		{"delay-link:0-1:5ms;late-rank:2:1ms;kill:1;corrupt:0", "cpu", true, ""},
		{"slow-rank:1:10MB/s", "nccl", false, "the nccl backend in one process does not plant slow-rank"},
		{"kill:1", "nccl", false, "run a process per rank"},
		{"kill:1;late-rank:0:2ms;hang:3", "nccl", true, ""},
		{"slow-link:0-1:1MB/s", "sim", false, ""}, // a backend without a list: its own faults
	} {
		fs, err := faults.Parse(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		err = faultsFitBackend(fs, tc.backend, tc.multi)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s on %s (multi %v): refused: %v", tc.spec, tc.backend, tc.multi, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || ExitCode(err) != ExitUsage):
			t.Errorf("%s on %s (multi %v): %v (exit %d), want %q", tc.spec, tc.backend, tc.multi, err, ExitCode(err), tc.refused)
		}
	}
	if err := faultsFitBackend(nil, "mpi", true); err != nil {
		t.Errorf("no faults: %v", err)
	}
}
