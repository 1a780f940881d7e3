package topology

import (
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// PCIPolicy is what the kernel and the bridges do to peer-to-peer traffic
// between GPUs and NICs: whether the IOMMU translates their DMA, which
// bridges on their paths redirect peer-to-peer requests to the root
// complex (PCIe ACS), and whether GPUDirect RDMA can reach GPU memory.
type PCIPolicy struct {
	// IOMMU is "off", "passthrough" or "translated", "" when unknown.
	IOMMU string `json:"iommu,omitempty"`
	// ACSRedirect lists the bridges on the GPUs' and NICs' paths whose ACS
	// control redirects peer-to-peer requests upstream.
	ACSRedirect []string `json:"acs_redirect,omitempty"`
	// ACSUnread says the bridges' extended configuration space could not
	// be read (it needs root), so ACS is unknown.
	ACSUnread bool `json:"acs_unread,omitempty"`
	// GPUDirectRDMA is the kernel module that lets RDMA NICs reach GPU
	// memory ("nvidia_peermem", "nv_peer_mem"), "none" when neither is
	// loaded, "" when the host has no RDMA NIC.
	GPUDirectRDMA string `json:"gpudirect_rdma,omitempty"`
}

var bdf = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCIPolicy reads the policy on the paths of the PCI functions buses (the
// GPUs and NICs); rdma says whether the host has an RDMA NIC.
func (s Sysfs) PCIPolicy(buses []string, rdma bool) PCIPolicy {
	var p PCIPolicy
	if groups, err := os.ReadDir(s.path("sys/kernel/iommu_groups")); err == nil {
		p.IOMMU = "off"
		if len(groups) > 0 {
			p.IOMMU = "translated"
			for _, b := range buses {
				if t := s.read("sys/bus/pci/devices", strings.ToLower(b), "iommu_group", "type"); t != "" {
					if t == "identity" {
						p.IOMMU = "passthrough"
					}
					break
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, b := range buses {
		path := s.pciPath(strings.ToLower(b))
		for i, part := range path {
			if i == len(path)-1 || !bdf.MatchString(part) || seen[part] {
				continue // the function itself, a root complex, or a bridge already read
			}
			seen[part] = true
			redirect, ok := acsRedirects(s.path("sys/bus/pci/devices", part, "config"))
			switch {
			case !ok:
				p.ACSUnread = true
			case redirect:
				p.ACSRedirect = append(p.ACSRedirect, part)
			}
		}
	}
	slices.Sort(p.ACSRedirect)
	if rdma {
		p.GPUDirectRDMA = "none"
		for _, m := range []string{"nvidia_peermem", "nv_peer_mem"} {
			if st, err := os.Stat(s.path("sys/module", m)); err == nil && st.IsDir() {
				p.GPUDirectRDMA = m
				break
			}
		}
	}
	return p
}

// The PCIe ACS extended capability and its control register's request
// and completion redirect bits.
const (
	acsCapID              = 0x000d
	acsRequestRedirect    = 1 << 2
	acsCompletionRedirect = 1 << 3
)

// acsRedirects reads a bridge's configuration space and says whether its
// ACS control redirects peer-to-peer requests or completions; ok is false
// when the extended space cannot be read.
func acsRedirects(config string) (redirect, ok bool) {
	b, err := os.ReadFile(config) //nolint:gosec // G304: a sysfs path built from a PCI address
	if err != nil || len(b) < 0x104 {
		return false, false
	}
	for off, hops := 0x100, 0; off >= 0x100 && off+8 <= len(b) && hops < 64; hops++ {
		h := binary.LittleEndian.Uint32(b[off:])
		if h == 0 || h == 0xffffffff {
			return false, true
		}
		if h&0xffff == acsCapID {
			ctl := binary.LittleEndian.Uint16(b[off+6:])
			return ctl&(acsRequestRedirect|acsCompletionRedirect) != 0, true
		}
		off = int(h >> 20)
	}
	return false, true
}

// Words says the policy in a few words, for host comparisons.
func (p PCIPolicy) Words() (iommu, acs, rdma string) {
	acs = "off"
	switch {
	case len(p.ACSRedirect) > 0:
		acs = fmt.Sprintf("redirecting at %d bridge(s)", len(p.ACSRedirect))
	case p.ACSUnread:
		acs = ""
	}
	return p.IOMMU, acs, p.GPUDirectRDMA
}
