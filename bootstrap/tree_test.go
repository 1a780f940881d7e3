package bootstrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestTreeShape(t *testing.T) {
	cases := []struct{ r, fanout, size, parent, children int }{
		{1, 2, 7, 0, 2}, {2, 2, 7, 0, 2}, {3, 2, 7, 1, 0}, {6, 2, 7, 2, 0},
		{1, 32, 8192, 0, 32}, {32, 32, 8192, 0, 32}, {33, 32, 8192, 1, 32}, {255, 32, 8192, 7, 31}, {8191, 32, 8192, 255, 0},
	}
	for _, c := range cases {
		if got := parentOf(c.r, c.fanout); got != c.parent {
			t.Errorf("parentOf(%d, %d) = %d, want %d", c.r, c.fanout, got, c.parent)
		}
		kids := childrenOf(c.r, c.fanout, c.size)
		if len(kids) != c.children {
			t.Errorf("childrenOf(%d, %d, %d) = %v, want %d children", c.r, c.fanout, c.size, kids, c.children)
		}
		for _, k := range kids {
			if parentOf(k, c.fanout) != c.r {
				t.Errorf("child %d of %d has parent %d", k, c.r, parentOf(k, c.fanout))
			}
		}
	}
}

// lossWatch records the first fault each member hears of.
type lossWatch struct {
	mu   sync.Mutex
	errs map[int]error
}

func watchLoss(worlds []*TCP) *lossWatch {
	w := &lossWatch{errs: map[int]error{}}
	for r, m := range worlds {
		m.OnPeerLost(func(err error) {
			w.mu.Lock()
			w.errs[r] = err
			w.mu.Unlock()
		})
	}
	return w
}

// wait returns once every rank but skip heard of a fault, or after limit.
func (w *lossWatch) wait(n int, skip map[int]bool, limit time.Duration) map[int]error {
	end := time.Now().Add(limit)
	for {
		w.mu.Lock()
		got := map[int]error{}
		for r, e := range w.errs {
			got[r] = e
		}
		w.mu.Unlock()
		all := true
		for r := 0; r < n; r++ {
			if _, ok := got[r]; !ok && !skip[r] {
				all = false
			}
		}
		if all || time.Now().After(end) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func closeAll(worlds []*TCP) {
	for _, w := range worlds {
		w.closeConns()
	}
}

// TestTreeGathersAndCarriesProgress forms a world four levels deep (fanout
// 3, 40 members): rank 0 holds three links; allgather and gather give
// every rank's data in rank order; the progress of a rank three levels
// down reaches rank 0; and an abort from that leaf reaches every member.
func TestTreeGathersAndCarriesProgress(t *testing.T) {
	const n = 40
	worlds := formWorld(t, n, func(r int) TCPOptions {
		return TCPOptions{Host: fmt.Sprint("h", r/4), Timeout: 30 * time.Second, Fanout: 3, BeatEvery: 50 * time.Millisecond, Silence: 10 * time.Second}
	})
	defer closeAll(worlds)
	if got := len(worlds[0].links()); got != 3 {
		t.Errorf("rank 0 holds %d links, want 3", got)
	}
	for r, w := range worlds {
		if got := len(w.links()); got > 4 {
			t.Errorf("rank %d holds %d links, want at most fanout+1", r, got)
		}
		if w.Hosts()[r] != fmt.Sprint("h", r/4) {
			t.Errorf("rank %d: hosts %v", r, w.Hosts())
		}
		w.SetStatus(func() []byte { return []byte(fmt.Sprint("progress-", r)) })
	}
	run := func(f func(w *TCP, r int) ([][]byte, error)) [][][]byte {
		out := make([][][]byte, n)
		var wg sync.WaitGroup
		for r, w := range worlds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				all, err := f(w, r)
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				out[r] = all
			}()
		}
		wg.Wait()
		return out
	}
	for round := 0; round < 3; round++ {
		got := run(func(w *TCP, r int) ([][]byte, error) { return w.AllGather([]byte(fmt.Sprint(round, "-", r))) })
		for r := range got {
			if len(got[r]) != n {
				t.Fatalf("round %d: rank %d got %d items", round, r, len(got[r]))
			}
			for i, d := range got[r] {
				if string(d) != fmt.Sprint(round, "-", i) {
					t.Fatalf("round %d: rank %d item %d = %q", round, r, i, d)
				}
			}
		}
	}
	got := run(func(w *TCP, r int) ([][]byte, error) { return w.Gather([]byte(fmt.Sprint("g", r))) })
	for i, d := range got[0] {
		if string(d) != fmt.Sprint("g", i) {
			t.Fatalf("gather: item %d = %q", i, d)
		}
	}
	for r := 1; r < n; r++ {
		if got[r] != nil {
			t.Fatalf("gather: rank %d got data", r)
		}
	}
	// Rank 39 is three links below rank 0 (39 -> 12 -> 3 -> 0).
	end := time.Now().Add(5 * time.Second)
	for {
		p, seen := worlds[0].PeerStatus(39)
		if string(p) == "progress-39" && time.Since(seen) < 2*time.Second {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("rank 0 has %q from rank 39, seen %v ago", p, time.Since(seen))
		}
		time.Sleep(20 * time.Millisecond)
	}
	lw := watchLoss(worlds)
	worlds[39].Abort(errors.New("boom"))
	errs := lw.wait(n, nil, 10*time.Second)
	for r := 0; r < n; r++ {
		if err := errs[r]; err == nil || !strings.Contains(err.Error(), "rank 39 (h9) failed: boom") {
			t.Errorf("rank %d heard %v", r, err)
		}
	}
}

// TestTreeNamesALostRelay plants the loss of a relay, in two ways and at
// two places: its connections cut (a process killed) and its beats stopped
// (a process frozen). Every other member, its own children included,
// names it.
func TestTreeNamesALostRelay(t *testing.T) {
	const n = 13 // fanout 3: ranks 1-3 relay for 4-12
	for _, c := range []struct {
		victim int
		how    string
	}{{1, "killed"}, {3, "killed"}, {2, "frozen"}} {
		t.Run(fmt.Sprint(c.how, "-", c.victim), func(t *testing.T) {
			worlds := formWorld(t, n, func(r int) TCPOptions {
				return TCPOptions{Host: fmt.Sprint("h", r), Timeout: 30 * time.Second, Fanout: 3, BeatEvery: 50 * time.Millisecond, Silence: 300 * time.Millisecond}
			})
			defer closeAll(worlds)
			lw := watchLoss(worlds)
			v := worlds[c.victim]
			want := "disconnected"
			if c.how == "killed" {
				// A killed process tells no one: its own view of the cut
				// links must not flood ahead of the cut.
				v.lostOnce.Do(func() {})
				v.stopOnce.Do(func() { close(v.stopBeat) })
				v.beats.close()
				for _, p := range v.links() {
					p.conn.Close()
				}
			} else {
				v.quietUntil.Store(time.Now().Add(time.Hour).UnixNano())
				want = "stopped answering"
			}
			// A frozen member here still runs (in this process), so its
			// watchers give it three bounds.
			errs := lw.wait(n, map[int]bool{c.victim: true}, 10*time.Second)
			for r := 0; r < n; r++ {
				if r == c.victim {
					continue
				}
				if err := errs[r]; err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d (h%d, pid %d) %s", c.victim, c.victim, os.Getpid(), want)) {
					t.Errorf("rank %d heard %v", r, err)
				}
			}
		})
	}
}

// TestTreeFaultsBetweenProcesses runs worlds of 7 processes in a tree of
// fanout 2 (ranks 1 and 2 relay for 3-6) and plants: a relay that never
// arrives, a leaf under another relay started with different arguments,
// a relay that dies, a leaf that dies. Every process that runs names the
// rank at fault.
func TestTreeFaultsBetweenProcesses(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6}
	fan := func(extra ...string) func(int) []string {
		return func(r int) []string { return append([]string{"CB_FANOUT=2"}, extra...) }
	}
	t.Run("relay-never-arrives", func(t *testing.T) {
		res := world(t, 7, []int{0, 2, 3, 4, 5, 6}, fan("CB_TIMEOUT=3s")) // the bound ends it
		for r, c := range res {
			if c.code == 0 || !strings.Contains(c.out, "rank 1 never arrived") {
				t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
			}
		}
	})
	t.Run("leaf-with-other-arguments", func(t *testing.T) {
		res := world(t, 7, all, func(r int) []string {
			if r == 5 {
				return []string{"CB_FANOUT=2", "CB_ARGS=allreduce --sizes 8:1G"}
			}
			return []string{"CB_FANOUT=2"}
		})
		for r, c := range res {
			if c.code == 0 || !strings.Contains(c.out, "rank 5 (host2) was started with different arguments") {
				t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
			}
		}
	})
	for _, victim := range []int{1, 6} {
		t.Run(fmt.Sprint("rank-", victim, "-dies"), func(t *testing.T) {
			res := world(t, 7, all, fan("CB_MODE=die", fmt.Sprint("CB_VICTIM=", victim)))
			if res[victim].code != 7 {
				t.Fatalf("rank %d should have died with 7: %+v", victim, res[victim])
			}
			for r, c := range res {
				if r == victim {
					continue
				}
				if c.code == 0 || !strings.Contains(c.out, fmt.Sprintf("rank %d (host%d, pid ", victim, victim/2)) || !strings.Contains(c.out, "disconnected") {
					t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
				}
			}
		})
	}
}

// TestStoppedRelayIsNamed stops (SIGSTOP) a relay of a 7-process tree:
// its parent and its own children name it within the silence bound.
func TestStoppedRelayIsNamed(t *testing.T) {
	addr := freeAddr(t)
	const silence = 1500 * time.Millisecond
	const victim = 2 // relays for 5 and 6
	var cmds []*exec.Cmd
	var outs []*syncBuffer
	for r := 0; r < 7; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test starts its own binary
		cmd.Env = append(os.Environ(), "CB_TEST_CHILD=1", fmt.Sprintf("CB_RANK=%d", r), "CB_SIZE=7", "CB_ADDR="+addr,
			"CB_TIMEOUT=10s", "CB_MODE=stop", "CB_SILENCE="+silence.String(), "CB_TOKEN=t", "CB_FANOUT=2")
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGCONT)
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for _, o := range outs {
		for !strings.Contains(o.String(), "READY") {
			if time.Now().After(deadline) {
				t.Fatalf("world did not form: %q", o.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := cmds[victim].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	want := fmt.Sprintf("rank %d (host1, pid %d) stopped answering", victim, cmds[victim].Process.Pid)
	for r := 0; r < 7; r++ {
		if r == victim {
			continue
		}
		done := make(chan error, 1)
		go func() { done <- cmds[r].Wait() }()
		select {
		case <-done:
		case <-time.After(silence + 10*time.Second):
			t.Fatalf("rank %d still waits %v after rank %d stopped: %q", r, time.Since(stopped), victim, outs[r].String())
		}
		if !strings.Contains(outs[r].String(), want) {
			t.Errorf("rank %d: want %q, got %q", r, want, outs[r].String())
		}
	}
	if took := time.Since(stopped); took > silence+5*time.Second {
		t.Errorf("named after %v (silence bound %v)", took, silence)
	}
	cmds = cmds[victim : victim+1]
}

// TestNoticeReachesEveryMember: a notice from a leaf three levels down and
// one from rank 0 reach all 40 members of a fanout-3 tree, whether they
// wait for it before or after it comes; another key stays unheard, and the
// world goes on (a notice is no fault).
func TestNoticeReachesEveryMember(t *testing.T) {
	const n = 40
	worlds := formWorld(t, n, func(r int) TCPOptions {
		return TCPOptions{Host: fmt.Sprint("h", r/4), Timeout: 30 * time.Second, Fanout: 3, BeatEvery: 50 * time.Millisecond, Silence: 10 * time.Second}
	})
	defer closeAll(worlds)
	for _, from := range []int{39, 0, 13} {
		key := fmt.Sprint("probe ended ", from)
		early := worlds[(from+7)%n].Noticed(key) // waited for before it comes
		worlds[from].Notice(key)
		worlds[from].Notice(key) // a second time: nothing more
		deadline := time.After(5 * time.Second)
		for r, w := range append(worlds, worlds[0]) {
			ch := w.Noticed(key)
			if r == n {
				ch = early
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("notice from rank %d: rank %d did not hear it in 5 s", from, r%n)
			}
		}
	}
	for r, w := range worlds {
		select {
		case <-w.Noticed("never said"):
			t.Fatalf("rank %d heard a key nobody said", r)
		default:
		}
	}
	var wg sync.WaitGroup
	for r, w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if all, err := w.AllGather([]byte{byte(r)}); err != nil || len(all) != n {
				t.Errorf("rank %d: after the notices, allgather gave %d items, %v", r, len(all), err)
			}
		}()
	}
	wg.Wait()
}
