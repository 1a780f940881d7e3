package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTakesDefaults(t *testing.T) {
	m, err := Parse([]byte("hosts: 64\nfabric:\n  hosts_per_leaf: 16\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Ranks() != 512 || m.Leaves() != 4 || m.LeafOf(17) != 1 || m.SpineOf(9) != 1 {
		t.Errorf("ranks %d leaves %d leaf of 17 %d spine of rail 9 %d", m.Ranks(), m.Leaves(), m.LeafOf(17), m.SpineOf(9))
	}
	if m.HostName(7) != "node-07" || m.LeafName(3) != "leaf-3" {
		t.Errorf("names %s %s", m.HostName(7), m.LeafName(3))
	}
}

// TestParseBadInput: every malformed cluster file gets one line naming
// the line and the problem, never a Go type.
func TestParseBadInput(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"hosts: 4\nhostz: 3\n", `line 2: unknown key "hostz"`},
		{"hosts: 4\nnic:\n  gbytes_per_s: -5\n", "line 3: gbytes_per_s: -5 must be above 0"},
		{"hosts: 4\nnvlink:\n  latency_us: -1\n", "line 3: latency_us: -1 must be 0 or more"},
		{"hosts: 0\n", "line 1: hosts: 0 must be 1 or more"},
		{"hosts: four\n", `line 1: "four" is not a whole number`},
		{"gpus_per_host: 8\n", "line 1: hosts: missing"},
		{"hosts: 4\nfaults:\n  - kind: slow-nic\n    host: 9\n    gpu: 0\n    factor: 0.5\n", "line 4: fault slow-nic: host 9 does not exist: the model has hosts 4 (0 to 3)"},
		{"hosts: 4\nfaults:\n  - kind: slow-gpu\n    host: 1\n    gpu: 8\n    factor: 0.5\n", "line 5: fault slow-gpu: gpu 8 does not exist"},
		{"hosts: 64\nfaults:\n  - kind: slow-uplink\n    leaf: 5\n    spine: 0\n    factor: 0.5\n", "line 4: fault slow-uplink: leaf 5 does not exist"},
		{"hosts: 4\nfaults:\n  - kind: slow-uplink\n    leaf: 0\n    spine: 0\n    factor: 0.5\n", "the model has one leaf"},
		{"hosts: 4\nfaults:\n  - kind: slow-nic\n    host: 1\n    gpu: 0\n    factor: 1.5\n", "line 6: fault slow-nic: factor 1.5 must be between 0 and 1"},
		{"hosts: 4\nfaults:\n  - kind: broken\n    host: 1\n", `line 3: fault kind "broken" is not one of slow-nic`},
		{"hosts: 4\nfaults:\n  - kind: slow-nic\n    host: 1\n", "line 3: fault slow-nic needs gpu:"},
		{"hosts: 4\nfaults:\n  - kind: wrong-data\n    host: 1\n    gpu: 0\n    leaf: 0\n", "line 6: fault wrong-data takes no leaf:"},
		{"hosts: 4\nfaults:\n  - kind: flapping-nic\n    host: 1\n    gpu: 0\n    factor: 0.5\n    every: 1\n", "line 7: fault flapping-nic: every 1 must be 2 or more"},
		{"hosts: 4\nfaults:\n  - kind: busy-fabric\n    factor: 0.5\n    for_s: 2\n", "line 3: fault busy-fabric needs from_s:"},
		{"hosts: 4\nfaults:\n  - kind: busy-fabric\n    factor: 0.5\n    from_s: -1\n    for_s: 2\n", "line 5: fault busy-fabric: from_s -1 must be 0 or more"},
		{"hosts: 4\nfaults:\n  - kind: busy-fabric\n    factor: 0.5\n    from_s: 0\n    for_s: -2\n", "line 6: fault busy-fabric: for_s -2 must be above 0"},
		{"hosts: 4\nfaults:\n  - kind: slow-nic\n    host: 1\n    gpu: 0\n    factor: 0.5\n    for_s: 3\n", "line 7: fault slow-nic takes no for_s:"},
		{"hosts: 4\nnoise:\n  spread: 0.7\n", "line 3: spread: 0.7 must be below 0.5"},
		{"", "empty cluster file"},
		{"hosts: [\n", "line"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil {
			t.Errorf("%q: no error, want %q", c.yaml, c.want)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "cluster.") {
			t.Errorf("%q: %q, want one line with %q", c.yaml, msg, c.want)
		}
	}
}

// TestShippedClustersLoad: every cluster file in configs/clusters parses.
func TestShippedClustersLoad(t *testing.T) {
	paths, err := filepath.Glob("../../../configs/clusters/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cluster files in configs/clusters (%v)", err)
	}
	for _, p := range paths {
		if _, err := Load(context.Background(), p); err != nil {
			t.Error(err)
		}
	}
}
