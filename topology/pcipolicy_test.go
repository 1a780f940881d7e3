package topology

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// bridgeConfig is a 4 KiB configuration space whose extended capabilities
// are a vendor-specific one, then ACS with control ctl (none when ctl < 0).
func bridgeConfig(ctl int) []byte {
	b := make([]byte, 4096)
	next := uint32(0)
	if ctl >= 0 {
		next = 0x140
	}
	binary.LittleEndian.PutUint32(b[0x100:], 0x000b|1<<16|next<<20)
	if ctl >= 0 {
		binary.LittleEndian.PutUint32(b[0x140:], 0x000d|1<<16)
		binary.LittleEndian.PutUint16(b[0x146:], uint16(ctl)) //nolint:gosec // G115: test values below 2^16
	}
	return b
}

// TestPCIPolicy reads the IOMMU mode, the bridges that redirect
// peer-to-peer traffic and the GPUDirect RDMA module from a sysfs tree.
func TestPCIPolicy(t *testing.T) {
	s, _ := fakeSysfs(t)
	write := func(p string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
	dev := func(bus string) string {
		p, err := filepath.EvalSymlinks(s.path("sys/bus/pci/devices", bus))
		if err != nil {
			// a bridge: find it under /sys/devices
			matches, _ := filepath.Glob(filepath.Join(s.Root, "sys", "devices", "*", bus))
			if len(matches) == 0 {
				matches, _ = filepath.Glob(filepath.Join(s.Root, "sys", "devices", "*", "*", bus))
			}
			if len(matches) == 0 {
				matches, _ = filepath.Glob(filepath.Join(s.Root, "sys", "devices", "*", "*", "*", bus))
			}
			if len(matches) == 0 {
				t.Fatalf("no device %s", bus)
			}
			p = matches[0]
			if err := os.Symlink(p, s.path("sys/bus/pci/devices", bus)); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	// GPU 0's path: 00:01.0 (ACS redirecting requests), 01:00.0 (ACS off),
	// 02:00.0 (no ACS at all); GPU 1's: 00:03.0 (redirecting completions), 20:00.0.
	write(filepath.Join(dev("0000:00:01.0"), "config"), bridgeConfig(acsRequestRedirect|1))
	write(filepath.Join(dev("0000:01:00.0"), "config"), bridgeConfig(1))
	write(filepath.Join(dev("0000:02:00.0"), "config"), bridgeConfig(-1))
	write(filepath.Join(dev("0000:00:03.0"), "config"), bridgeConfig(acsCompletionRedirect))
	write(filepath.Join(dev("0000:20:00.0"), "config"), bridgeConfig(0))
	groups := s.path("sys/kernel/iommu_groups")
	write(filepath.Join(groups, "7", "type"), []byte("DMA-FQ\n"))
	if err := os.Symlink(filepath.Join(groups, "7"), filepath.Join(dev("0000:03:00.0"), "iommu_group")); err != nil {
		t.Fatal(err)
	}
	p := s.PCIPolicy([]string{"0000:03:00.0", "0000:21:00.0"}, true)
	if p.IOMMU != "translated" || !slices.Equal(p.ACSRedirect, []string{"0000:00:01.0", "0000:00:03.0"}) || p.ACSUnread || p.GPUDirectRDMA != "none" {
		t.Errorf("policy %+v", p)
	}
	// GPU 2's bridges have only a short config space (read without root):
	// ACS is unknown, not off.
	write(filepath.Join(dev("0000:80:01.0"), "config"), make([]byte, 64))
	write(filepath.Join(dev("0000:84:00.0"), "config"), make([]byte, 64))
	write(filepath.Join(groups, "7", "type"), []byte("identity\n"))
	if err := os.MkdirAll(s.path("sys/module/nvidia_peermem"), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
		t.Fatal(err)
	}
	p = s.PCIPolicy([]string{"0000:03:00.0", "0000:85:00.0"}, true)
	if p.IOMMU != "passthrough" || !p.ACSUnread || p.GPUDirectRDMA != "nvidia_peermem" {
		t.Errorf("policy %+v", p)
	}
	if iommu, acs, rdma := p.Words(); iommu != "passthrough" || acs != "redirecting at 1 bridge(s)" || rdma != "nvidia_peermem" {
		t.Errorf("words %q %q %q", iommu, acs, rdma)
	}
	if p := (Sysfs{Root: t.TempDir()}).PCIPolicy(nil, false); p.IOMMU != "" || p.GPUDirectRDMA != "" {
		t.Errorf("an empty sysfs: %+v", p)
	}
}
