package main

import (
	"fmt"
	"strings"
	"testing"

	"collbench/watch"
)

// TestPluginNamesACopyOverNVLink: four processes of one communicator, each
// on a GPU of its own whose NVLink counters count what the job's
// operations move (64 MiB allreduces, allgathers and broadcasts every 8
// ms, and 256 MiB sent to the next rank and received from the one before
// each time: about 65 GB/s each way, counted at 1.1 times what NCCL's
// protocol puts on the wire), read every 50 ms. Half of that is the
// point-to-point operations': without them in the job's bound, the clean
// job's GPUs were all named (tried). Another program copying
// 100 GB/s from one GPU to another from operation 50 on (the first pair
// under interface v4, a middle one, the wrap) has both GPUs named, the
// sender with the receiver as its peer, nobody else, and no rank; a clean
// job names nobody, with every GPU's readings judged; a communicator that
// NCCL says spans two hosts leaves its GPUs unjudged, copy or not, and
// says so; without NVML the collector says why nothing was read.
func TestPluginNamesACopyOverNVLink(t *testing.T) {
	for _, c := range []struct {
		name     string
		version  int
		from, to int // -1: clean
		nvml     bool
		nodes    int
	}{
		{"clean", 5, -1, -1, true, 1},
		{"0 to 1, interface v4", 4, 0, 1, true, 1},
		{"1 to 2", 6, 1, 2, true, 1},
		{"3 to 0", 5, 3, 0, true, 1},
		{"2 to 3, across two hosts", 5, 2, 3, true, 2},
		{"no NVML", 5, -1, -1, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && (c.name == "0 to 1, interface v4" || c.name == "3 to 0") {
				t.Skip("the copy at another pair: make test-long runs it (the short run plants one pair, and interface v4 in TestPluginNamesTheLateRank)")
			}
			addr, findings, _, counts := collector(t, "job-secret")
			built(t)
			env := []string{watch.EnvAddr + "=" + addr, "COLLBENCH_TOKEN=job-secret", watch.EnvNVLinkEvery + "=50",
				"HARNESS_CUDA=" + cudaPath, "HARNESS_COUNT=16777216", "HARNESS_SENDS=268435456", fmt.Sprintf("HARNESS_NODES=%d", c.nodes)}
			if c.nvml {
				env = append(env, "HARNESS_NVML="+nvmlPath, watch.EnvNVML+"="+nvmlPath)
			} else {
				env = append(env, watch.EnvNVML+"=/nonexistent/libnvidia-ml.so.1")
			}
			if c.from >= 0 {
				env = append(env, fmt.Sprintf("HARNESS_P2P=%d:%d:1e11:50:1000", c.from, c.to))
			}
			j := job{version: c.version, ranks: 4, ops: 300, periodUS: 8000, lateRank: -1, env: env}
			got := j.run(t)
			got.quiet(t)
			n := judgedAll(counts, func(n watch.Counts) bool { return n.Operations >= int64(j.ops) })
			fs := findings()
			if !c.nvml {
				if n.NVLink == nil || n.NVLink.GPUs != 0 || !strings.Contains(n.NVLink.Unread, "cannot be loaded") || len(fs) > 0 {
					t.Errorf("without NVML: %+v, %v", n.NVLink, fs)
				}
				return
			}
			if c.nodes > 1 {
				if n.NVLink == nil || n.NVLink.GPUs != 4 || n.NVLink.Spans != 4 || n.NVLink.Readings != 0 || len(fs) > 0 {
					t.Errorf("across hosts: %+v, %v", n.NVLink, fs)
				}
				return
			}
			if n.NVLink == nil || n.NVLink.GPUs != 4 || n.NVLink.Readings < 4*20 {
				t.Fatalf("NVLink readings: %+v (%s)", n.NVLink, n)
			}
			if c.from < 0 {
				if len(fs) > 0 {
					t.Errorf("a clean job named %v", fs[0])
				}
				return
			}
			named := map[string]watch.Finding{}
			for _, f := range fs {
				if f.NVLink == nil || f.Cleared {
					t.Errorf("named %s", f)
					continue
				}
				named[f.GPU] = f
			}
			from, to := fmt.Sprintf("0000:%02X:00.0", 0x10+c.from), fmt.Sprintf("0000:%02X:00.0", 0x10+c.to)
			out, in := named[from], named[to]
			if len(named) != 2 || out.NVLink == nil || in.NVLink == nil {
				t.Fatalf("named %v, want GPUs %s and %s", fs, from, to)
			}
			if v := out.NVLink; v.OutBps < 80e9 || v.OutBps > 120e9 || len(v.Peers) != 1 || v.Peers[0] != to || out.Rank != c.from {
				t.Errorf("the sender: %s", out)
			}
			if v := in.NVLink; v.InBps < 80e9 || v.InBps > 120e9 || in.Rank != c.to {
				t.Errorf("the receiver: %s", in)
			}
			t.Logf("%s", out)
		})
	}
}

// TestPluginWithAMalformedNVLinkPeriod: a period that is not a whole
// number of milliseconds is one line on each rank's stderr naming it; the
// job's operations are still sent and judged, and no NVLink is read.
func TestPluginWithAMalformedNVLinkPeriod(t *testing.T) {
	addr, findings, _, counts := collector(t, "job-secret")
	built(t)
	env := []string{watch.EnvAddr + "=" + addr, "COLLBENCH_TOKEN=job-secret", watch.EnvNVLinkEvery + "=fast",
		"HARNESS_CUDA=" + cudaPath, "HARNESS_NVML=" + nvmlPath, watch.EnvNVML + "=" + nvmlPath}
	j := job{version: 5, ranks: 2, ops: 60, periodUS: 2000, lateRank: -1, env: env}
	got := j.run(t)
	for r, e := range got.stderr {
		if lines := strings.Split(strings.TrimSpace(e), "\n"); len(lines) != 1 || !strings.Contains(lines[0], watch.EnvNVLinkEvery+`="fast" is not a whole number`) {
			t.Errorf("rank %d wrote %q", r, e)
		}
	}
	n := judgedAll(counts, func(n watch.Counts) bool { return n.Operations >= int64(j.ops) })
	if n.Operations != int64(j.ops) || n.NVLink != nil || len(findings()) > 0 {
		t.Errorf("the collector %s (NVLink %+v), named %v", n, n.NVLink, findings())
	}
}

// TestPluginWithAStuckNVML: an NVML whose counter reads never return stops
// the readings only: every operation is still sent and judged, and each
// rank finalizes and exits (before the readings had a goroutine of their
// own, they ran under the lock the finalize takes).
func TestPluginWithAStuckNVML(t *testing.T) {
	addr, findings, _, counts := collector(t, "job-secret")
	built(t)
	env := []string{watch.EnvAddr + "=" + addr, "COLLBENCH_TOKEN=job-secret", watch.EnvNVLinkEvery + "=20", "NVML_STANDIN_HANG=1",
		"HARNESS_CUDA=" + cudaPath, "HARNESS_NVML=" + nvmlPath, watch.EnvNVML + "=" + nvmlPath}
	j := job{version: 5, ranks: 2, ops: 60, periodUS: 2000, lateRank: -1, env: env}
	got := j.run(t)
	got.quiet(t)
	n := judgedAll(counts, func(n watch.Counts) bool { return n.Operations >= int64(j.ops) })
	if n.Operations != int64(j.ops) || len(findings()) > 0 {
		t.Errorf("the collector %s, named %v", n, findings())
	}
}
