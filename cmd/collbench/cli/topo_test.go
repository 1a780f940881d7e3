package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"collbench/engine"
	"collbench/topology"
)

// dgxMock is go-nvml's DGX A100 mock with 12 NVLinks per GPU to NVSwitches.
func dgxMock() nvml.Interface {
	s := dgxa100.New()
	for _, dev := range s.Devices {
		d := dev.(*dgxa100.Device)
		d.GetNvLinkStateFunc = func(n int) (nvml.EnableState, nvml.Return) {
			if n >= 12 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) { return 3, nvml.SUCCESS }
		d.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
		d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	}
	return s
}

func noNVML() nvml.Interface {
	return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
}

func TestTopoOnMockMachine(t *testing.T) {
	f, out, errOut := testFactory()
	f.NVML = dgxMock
	code := run(t, f, "topo", "--no-nccl", "--sysfs", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	s := out.String()
	for _, want := range []string{"GPU0 |    X | NV12 | NV12", "8x Mock NVIDIA A100-SXM4-40GB; NV12 between all pairs; NVLink 12 x 25.00 = 300.0 GB/s per GPU",
		"NV#  = connection traversing a bonded set of # NVLinks", "# unavailable: sysfs:", "# unavailable: NCCL's view: skipped (--no-nccl)", "rwna"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestTopoJSONRecordAndReplay(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "facts.json")
	f, out, _ := testFactory()
	f.NVML = dgxMock
	if code := run(t, f, "topo", "--no-nccl", "--format", "json", "--record", rec); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var first topology.Topology
	if err := json.Unmarshal(out.Bytes(), &first); err != nil || len(first.GPUs) != 8 {
		t.Fatalf("%v %+v", err, first)
	}
	// Replaying the recording without NVML gives the same machine.
	f, out, _ = testFactory()
	f.NVML = noNVML
	if code := run(t, f, "topo", "--no-nccl", "--format", "json", "--facts", rec); code != 0 {
		t.Fatalf("replay exit %d", code)
	}
	var again topology.Topology
	if err := json.Unmarshal(out.Bytes(), &again); err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint != first.Fingerprint || again.Matrix[3][4] != "NV12" {
		t.Fatalf("replay differs: %s vs %s", again.Fingerprint, first.Fingerprint)
	}
}

func TestTopoParsesCapturedNCCLFiles(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "nccl.log")
	if err := os.WriteFile(logPath, []byte("h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"+ //nolint:gosec // test files in the test's own temporary directory
		"h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"+
		"h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, out, errOut := testFactory()
	f.NVML = noNVML
	if code := run(t, f, "topo", "--nccl-log", logPath, "--sysfs", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"ranks 2, nodes 1, local ranks 2", "rank 0 -> 1 via P2P/IPC", "NCCL 2.21.5", "# unavailable: NVML: ERROR_LIBRARY_NOT_FOUND"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTopoNothingReadable(t *testing.T) {
	f, out, errOut := testFactory()
	f.NVML = noNVML
	code := run(t, f, "topo", "--no-nccl", "--sysfs", t.TempDir())
	if code != engine.ExitRunFailed || out.Len() != 0 || !strings.Contains(errOut.String(), "nothing could be read: NVML: ERROR_LIBRARY_NOT_FOUND") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
	f, _, errOut = testFactory()
	if code := run(t, f, "topo", "--format", "yaml"); code != engine.ExitUsage {
		t.Fatalf("bad format: exit %d %s", code, errOut)
	}
	f, _, errOut = testFactory()
	if code := run(t, f, "topo", "--facts", "/nonexistent.json"); code != engine.ExitUsage || !strings.Contains(errOut.String(), "cannot read --facts") {
		t.Fatalf("missing facts: exit %d %s", code, errOut)
	}
}
