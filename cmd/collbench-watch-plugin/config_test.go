package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"collbench/watch"
)

// TestNewSender: the plugin's reading of its environment. Without a
// collector nothing is sent and nothing said; a malformed address, a
// missing secret or a sample that is not a whole number from 1 to
// 1,000,000 is one line and no sender; both given make a sender.
func TestNewSender(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		send bool
		says string
	}{
		{"nothing set", nil, false, ""},
		{"no port", map[string]string{watch.EnvAddr: "node01", "COLLBENCH_TOKEN": "s"}, false, "is not host:port"},
		{"port out of range", map[string]string{watch.EnvAddr: "node01:70000", "COLLBENCH_TOKEN": "s"}, false, "is not host:port"},
		{"no host", map[string]string{watch.EnvAddr: ":29600", "COLLBENCH_TOKEN": "s"}, false, "is not host:port"},
		{"no secret", map[string]string{watch.EnvAddr: "127.0.0.1:9"}, false, "without the job secret"},
		{"secret file missing", map[string]string{watch.EnvAddr: "127.0.0.1:9", "COLLBENCH_TOKEN_FILE": "/nonexistent/token"}, false, "without the job secret"},
		{"both", map[string]string{watch.EnvAddr: "127.0.0.1:9", "COLLBENCH_TOKEN": "s"}, true, ""},
		{"a sample of every 8th", map[string]string{watch.EnvAddr: "127.0.0.1:9", "COLLBENCH_TOKEN": "s", watch.EnvEvery: "8"}, true, ""},
		{"sample not a number", map[string]string{watch.EnvAddr: "127.0.0.1:9", "COLLBENCH_TOKEN": "s", watch.EnvEvery: "half"}, false, "COLLBENCH_WATCH_EVERY=\"half\" is not a whole number from 1 to 1000000"},
		{"sample of 0", map[string]string{watch.EnvAddr: "127.0.0.1:9", "COLLBENCH_TOKEN": "s", watch.EnvEvery: "0"}, false, "is not a whole number"},
		{"sample too sparse", map[string]string{watch.EnvAddr: "127.0.0.1:9", "COLLBENCH_TOKEN": "s", watch.EnvEvery: "1000001"}, false, "is not a whole number"},
	} {
		var lines []string
		s := newSender(func(k string) string { return c.env[k] }, func(l string) { lines = append(lines, l) })
		if (s != nil) != c.send {
			t.Errorf("%s: sender %v, want one: %v", c.name, s != nil, c.send)
		}
		if s != nil {
			s.Close()
			// Nothing listens at port 9: the sender may have said so
			// before it was closed, which is its own line, not this one.
			lines = slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, "does not answer") })
		}
		switch {
		case c.says == "" && len(lines) > 0:
			t.Errorf("%s: said %q", c.name, lines)
		case c.says != "" && (len(lines) != 1 || !strings.Contains(lines[0], c.says)):
			t.Errorf("%s: said %q, want one line with %q", c.name, lines, c.says)
		}
	}
}

// TestConfigureWithoutACollector: configured without COLLBENCH_WATCH, the
// NCCL side is off (it asks NCCL for no event), not left undecided.
func TestConfigureWithoutACollector(t *testing.T) {
	t.Setenv(watch.EnvAddr, "")
	if got := enabled(); got != -1 {
		t.Fatalf("before configuring: %d, want -1", got)
	}
	cbwConfigure()
	if got := enabled(); got != 0 {
		t.Errorf("after configuring without a collector: %d, want 0 (off)", got)
	}
}

// TestFinalizeWithoutACollector: a communicator finalized in a process
// with no collector configured costs nothing: nothing is taken or sent,
// and NCCL's call returns at once.
func TestFinalizeWithoutACollector(t *testing.T) {
	t.Setenv(watch.EnvAddr, "")
	cbwConfigure()
	start := time.Now()
	cbwFinalize()
	if running.Load() != nil {
		t.Error("a collector's taker runs without COLLBENCH_WATCH")
	}
	// A finalize that flushed would wait up to a second for a collector;
	// half that is a margin a loaded 2-core machine does not cross.
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("finalize took %v without a collector", took)
	}
}
