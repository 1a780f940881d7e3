package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"collbench/backend/nccl/fakegpu"
)

// TestTuneSaysHowAJobAppliesItsFile: on NCCL, a tuner file written says
// how a job loads it (the watch plugin's library, COLLBENCH_TUNER_FILE).
func TestTuneSaysHowAJobAppliesItsFile(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "tuner.csv")
	f, out, errOut := fakeGPUFactory(2, fakegpu.Options{})
	code := run(t, f, "tune", "--backend", "nccl", "--collectives", "allreduce", "--sizes", "8,64K", "-n", "2", "-w", "1", "--repeats", "2",
		"--budget", "60s", "--tuner-file", csv)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	want := "collbench tune: a job applies it with NCCL_TUNER_PLUGIN=$(collbench watch --plugin-path) COLLBENCH_TUNER_FILE=" + csv
	if !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
}
