package engine

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"collbench/bootstrap"
	"collbench/watch"
)

// Watch is one collbench watch run: the collector of a running job's
// summaries, listening on Listen, for For (0: until ctx ends).
type Watch struct {
	Listen string
	For    time.Duration
	// Persist is how long a rank or link must stay late or slow before
	// it is named (watch.Options.Persist); 0 names at once.
	Persist time.Duration
	// OnListening receives the address the collector listens on;
	// OnFinding each rank named or cleared; OnNote each process refused;
	// OnCounts what the collector has taken in, every CountsEvery
	// (default 10 s) while it runs.
	OnListening func(addr string)
	OnFinding   func(watch.Finding)
	OnNote      func(string)
	OnCounts    func(watch.Counts)
	CountsEvery time.Duration
}

// RunWatch runs the collector until ctx ends or w.For has passed, and
// returns the findings that stand at the end and what it took in.
func (f *System) RunWatch(ctx context.Context, w Watch) ([]watch.Finding, watch.Counts, error) {
	_, port, err := net.SplitHostPort(w.Listen)
	if err != nil {
		return nil, watch.Counts{}, UsageErrorf("--listen %q: give host:port or :port (e.g. :29600)", w.Listen)
	}
	if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
		return nil, watch.Counts{}, UsageErrorf("--listen %q: the port must be a number from 1 to 65535 (0 for any free port)", w.Listen)
	}
	if w.For < 0 {
		return nil, watch.Counts{}, UsageErrorf("--for %v: give a positive duration, or 0 to run until interrupted", w.For)
	}
	if w.Persist < 0 {
		return nil, watch.Counts{}, UsageErrorf("--persist %v: give how long a rank or link must stay late or slow before it is named (e.g. 2s), or 0 to name it at once", w.Persist)
	}
	key, err := bootstrap.LoadSecret(f.Getenv)
	if err != nil {
		return nil, watch.Counts{}, &UsageError{Err: err}
	}
	if len(key) == 0 {
		return nil, watch.Counts{}, UsageErrorf("collbench watch needs the job's secret: set %s (or %s) to the value the job's processes have", bootstrap.EnvToken, bootstrap.EnvTokenFile)
	}
	judge := watch.DefaultOptions()
	judge.Persist = max(w.Persist, time.Nanosecond)
	s, err := watch.Listen(w.Listen, key, watch.ServerOptions{Judge: judge, OnFinding: w.OnFinding, OnNote: w.OnNote})
	if err != nil {
		return nil, watch.Counts{}, UsageErrorf("%v", err)
	}
	if w.OnListening != nil {
		w.OnListening(s.Addr())
	}
	if w.For > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.For)
		defer cancel()
	}
	if w.OnCounts != nil {
		every := w.CountsEvery
		if every <= 0 {
			every = 10 * time.Second
		}
		tick := time.NewTicker(every)
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-tick.C:
					w.OnCounts(s.Counts())
				case <-done:
					return
				}
			}
		}()
		defer func() { tick.Stop(); close(done); wg.Wait() }()
	}
	err = s.Serve(ctx)
	return s.Standing(), s.Counts(), err
}

// watchSenders are this process's senders to a collector, by address:
// every backend opened in the process shares one.
var watchSenders sync.Map

// watchSink is the sender to the collector $COLLBENCH_WATCH names, or nil
// without one. A malformed address or a missing job secret is one line on
// stderr and no sender: the job runs as it would without collbench watch.
func (f *System) watchSink() *watch.Sender {
	addr := f.Getenv(watch.EnvAddr)
	if addr == "" {
		return nil
	}
	if s, ok := watchSenders.Load(addr); ok {
		return s.(*watch.Sender)
	}
	warn := func(line string) {
		if f.Stderr != nil {
			fmt.Fprintln(f.Stderr, line)
		}
	}
	me, _ := f.Hostname()
	s := watch.SenderFromEnv(f.Getenv, "collbench watch", watch.SenderOptions{Host: me, PID: os.Getpid(), Warn: warn})
	if s == nil {
		watchSenders.Store(addr, (*watch.Sender)(nil))
		return nil
	}
	actual, _ := watchSenders.LoadOrStore(addr, s)
	if actual != s {
		s.Close()
	}
	return actual.(*watch.Sender)
}

// CloseWatch sends what this process's senders to collbench watch still
// hold and closes them, about a second at most for a collector that is
// slow or gone: the process's last operations reach the collector too. A
// process that ends calls it once its command has returned.
func CloseWatch() {
	watchSenders.Range(func(addr, v any) bool {
		if s, _ := v.(*watch.Sender); s != nil {
			s.Close()
		}
		watchSenders.Delete(addr)
		return true
	})
}

// WatchPluginName is the file name of collbench watch's NCCL profiler
// plugin (make plugin).
const WatchPluginName = "libcollbench-watch.so"

// WatchPluginPath finds the watch plugin that goes with the collbench
// executable at exe: beside it (make plugin, make gpu-bins), or in
// ../lib/collbench (make install). Not found is a usage error saying how
// to build it.
func WatchPluginPath(exe string) (string, error) {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	dir := filepath.Dir(exe)
	tried := []string{filepath.Join(dir, WatchPluginName), filepath.Join(dir, "..", "lib", "collbench", WatchPluginName)}
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return filepath.Clean(p), nil
		}
	}
	return "", UsageErrorf("collbench watch's NCCL plugin is not installed (looked for %s and %s): build it with make plugin, or install it with make install",
		tried[0], filepath.Clean(tried[1]))
}
