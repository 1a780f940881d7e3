package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as one rank of a world when
// CB_TEST_CHILD is set, so the tests below start real processes.
func TestMain(m *testing.M) {
	if os.Getenv("CB_TEST_CHILD") == "1" {
		os.Exit(child())
	}
	if os.Getenv("CB_SLEEP") == "1" { // a live process of this program, for runsHere
		time.Sleep(30 * time.Second)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child() int {
	rank, _ := strconv.Atoi(os.Getenv("CB_RANK"))
	size, _ := strconv.Atoi(os.Getenv("CB_SIZE"))
	timeout, _ := time.ParseDuration(os.Getenv("CB_TIMEOUT"))
	silence, _ := time.ParseDuration(os.Getenv("CB_SILENCE"))
	fanout, _ := strconv.Atoi(os.Getenv("CB_FANOUT"))
	victim := 2
	if v := os.Getenv("CB_VICTIM"); v != "" {
		victim, _ = strconv.Atoi(v)
	}
	if os.Getenv("CB_MODE") == "cost" {
		return rootCost(size, timeout)
	}
	t, err := Join(context.Background(), TCPOptions{Rank: rank, Size: size, Addr: os.Getenv("CB_ADDR"),
		Host: fmt.Sprintf("host%d", rank/2), Args: strings.Fields(os.Getenv("CB_ARGS")), Timeout: timeout,
		Token: []byte(os.Getenv("CB_TOKEN")), BeatEvery: silence / 5, Silence: silence, Fanout: fanout})
	if err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	if rank == 0 {
		t.OnLoadedPeer(func(r int, quiet time.Duration) { fmt.Printf("LOADED rank %d\n", r) })
	}
	all, err := t.AllGather([]byte(fmt.Sprintf("payload-%d", rank)))
	if err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	fmt.Printf("hosts=%s data=%s\n", strings.Join(t.Hosts(), ","), bytes.Join(all, []byte(",")))
	if os.Getenv("CB_MODE") == "die" && rank == victim {
		os.Exit(7) // dies mid-run without saying goodbye
	}
	if os.Getenv("CB_MODE") == "mute" {
		// Rank 2 is alive but sends nothing for twice the silence bound,
		// as a process starved on a loaded machine: it is not named.
		if rank == 2 {
			t.quietUntil.Store(time.Now().Add(2 * silence).UnixNano())
			time.Sleep(2*silence + silence/2)
		}
		_, err := t.AllGather(nil)
		if err == nil {
			err = t.Close()
		}
		fmt.Println("MUTE END:", err)
		if err != nil {
			return 3
		}
		return 0
	}
	if os.Getenv("CB_MODE") == "stop" {
		fmt.Println("READY")
		time.Sleep(time.Second) // the test stops rank 2 in this second
		start := time.Now()
		_, err := t.AllGather(nil) // the test stops rank 2 before it gets here
		fmt.Printf("ERR after %v: %v\n", time.Since(start).Round(100*time.Millisecond), err)
		return 3
	}
	if _, err := t.AllGather(nil); err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	if err := t.Close(); err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	return 0
}

// rootCost runs rank 0 alone in this process and prints what forming the
// world, one allgather of 64 bytes from each rank and the closing barrier
// cost it: wall and CPU seconds, and its peak memory.
func rootCost(size int, timeout time.Duration) int {
	cpu := func() float64 {
		var u syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
		return time.Duration(u.Utime.Nano() + u.Stime.Nano()).Seconds()
	}
	start, c0 := time.Now(), cpu()
	t, err := Join(context.Background(), TCPOptions{Rank: 0, Size: size, Addr: os.Getenv("CB_ADDR"), Host: "h0",
		Args: []string{"cost"}, Timeout: timeout, Token: []byte("k"), Silence: time.Minute})
	if err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	fmt.Printf("COST joined %.3f %.3f\n", time.Since(start).Seconds(), cpu()-c0)
	start, c0 = time.Now(), cpu()
	if _, err := t.AllGather(make([]byte, 64)); err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	fmt.Printf("COST gathered %.3f %.3f\n", time.Since(start).Seconds(), cpu()-c0)
	if err := t.Close(); err != nil {
		fmt.Println("ERR:", err)
		return 3
	}
	// The peak resident size of this process (VmHWM, in kB); getrusage's
	// would carry the test process's over from before the exec.
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Printf("COST maxrss %s\n", strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type childResult struct {
	code int
	out  string
}

// world starts the given ranks of a world of size processes. The address
// is free when chosen but not held until rank 0 binds it, so another test
// process may take it first; then the ranks meet a stranger (and refuse
// it) and the world is started again on a new address.
func world(t *testing.T, size int, ranks []int, env func(rank int) []string) map[int]childResult {
	t.Helper()
	for attempt := 1; ; attempt++ {
		res := worldAt(t, freeAddr(t), size, ranks, env)
		stolen := false
		for _, c := range res {
			if strings.Contains(c.out, "does not answer as a collbench rank 0") || strings.Contains(c.out, "address already in use") {
				stolen = true
			}
		}
		if !stolen || attempt == 3 {
			return res
		}
		t.Logf("the address was taken by another process; starting the world again")
	}
}

// worldAt starts the given ranks with rank 0 at addr.
func worldAt(t *testing.T, addr string, size int, ranks []int, env func(rank int) []string) map[int]childResult {
	t.Helper()
	res := map[int]childResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range ranks {
		cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test starts its own binary or a shell helper it wrote
		cmd.Env = append(os.Environ(), "CB_TEST_CHILD=1", fmt.Sprintf("CB_RANK=%d", r), fmt.Sprintf("CB_SIZE=%d", size),
			"CB_ADDR="+addr, "CB_TIMEOUT=30s", "CB_ARGS=allreduce --sizes 8:1M") // loose: a loaded host starts its children slowly
		if env != nil {
			cmd.Env = append(cmd.Env, env(r)...)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			mu.Lock()
			res[r] = childResult{code, out.String()}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

func TestRendezvousFormsWorldAndExchanges(t *testing.T) {
	res := world(t, 4, []int{0, 1, 2, 3}, nil)
	for r := 0; r < 4; r++ {
		c := res[r]
		want := "hosts=host0,host0,host1,host1 data=payload-0,payload-1,payload-2,payload-3"
		if c.code != 0 || !strings.Contains(c.out, want) {
			t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
		}
	}
}

func TestRendezvousNamesMissingRank(t *testing.T) {
	res := world(t, 4, []int{0, 1, 2}, func(int) []string { return []string{"CB_TIMEOUT=3s"} }) // the bound ends it
	for r := 0; r < 3; r++ {
		c := res[r]
		if c.code == 0 || !strings.Contains(c.out, "rank 3 never arrived") {
			t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
		}
	}
}

func TestRendezvousRejectsDifferentArguments(t *testing.T) {
	res := world(t, 3, []int{0, 1, 2}, func(r int) []string {
		if r == 2 {
			return []string{"CB_ARGS=allreduce --sizes 8:1G"}
		}
		return nil
	})
	for r := 0; r < 3; r++ {
		c := res[r]
		if c.code == 0 || !strings.Contains(c.out, "rank 2 (host1) was started with different arguments") {
			t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
		}
	}
}

func TestDeadRankStopsTheOthers(t *testing.T) {
	res := world(t, 4, []int{0, 1, 2, 3}, func(int) []string { return []string{"CB_MODE=die"} })
	if res[2].code != 7 {
		t.Fatalf("rank 2 should have died with 7: %+v", res[2])
	}
	for _, r := range []int{0, 1, 3} {
		c := res[r]
		if c.code == 0 || !strings.Contains(c.out, "rank 2 (host1, pid ") || !strings.Contains(c.out, "disconnected") {
			t.Errorf("rank %d: exit %d, output %q", r, c.code, c.out)
		}
	}
}

func TestListenAddrBindsOnlyTheGivenAddress(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:5000": "127.0.0.1:5000", "localhost:7": "localhost:7", "[::1]:9": "[::1]:9"} {
		if got, err := listenAddr(in); err != nil || got != want {
			t.Errorf("listenAddr(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"nocolon", ":29500", "no-such-host.invalid:1"} {
		if got, err := listenAddr(bad); err == nil {
			t.Errorf("listenAddr(%q) = %q, want an error", bad, got)
		}
	}
}

func TestListEncoding(t *testing.T) {
	in := [][]byte{nil, []byte("a"), bytes.Repeat([]byte{7}, 1000)}
	out, err := decodeList(encodeList(in))
	if err != nil || len(out) != 3 || len(out[0]) != 0 || string(out[1]) != "a" || len(out[2]) != 1000 {
		t.Fatalf("%v %v", out, err)
	}
	if _, err := decodeList([]byte{5, 0, 0, 0}); err == nil {
		t.Fatal("truncated list accepted")
	}
}

// TestRecvPrefersQueuedDataOverLoss models the end of the final barrier: the
// answer is queued and the connection is gone. The answer must win every
// time, not half of the time.
func TestRecvPrefersQueuedDataOverLoss(t *testing.T) {
	for i := 0; i < 200; i++ {
		p := &peer{rank: 0, q: newQueue()}
		tc := &TCP{rank: 1, size: 2, up: p, lostErr: make(chan error, 1)}
		p.q.push([]byte("answer"))
		tc.lostErr <- fmt.Errorf("rank 0 left")
		got, err := tc.recv(p)
		if err != nil || string(got) != "answer" {
			t.Fatalf("try %d: got %q, %v; want the queued answer", i, got, err)
		}
		if _, err := tc.recv(p); err == nil || err.Error() != "rank 0 left" {
			t.Fatalf("try %d: after the answer, want the loss, got %v", i, err)
		}
	}
}

// TestSilenceOnALoadedMachine: a peer is named silent past the bound plus
// this process's own stall; one that runs on this machine, alive and not
// stopped, only past three bounds (the machine is loaded, the peer is not
// dead); a stopped one, or one that is not a collbench here, at the bound.
func TestSilenceOnALoadedMachine(t *testing.T) {
	const s = 20 * time.Second
	cases := []struct {
		quiet, lag time.Duration
		here, want bool
	}{
		{21 * time.Second, 0, false, true},
		{21 * time.Second, 5 * time.Second, false, false},
		{26 * time.Second, 5 * time.Second, false, true},
		{21 * time.Second, 0, true, false},
		{59 * time.Second, 0, true, false},
		{61 * time.Second, 0, true, true},
	}
	for _, c := range cases {
		if got := silentPast(c.quiet, s, c.lag, c.here); got != c.want {
			t.Errorf("quiet %v, lag %v, runs here %v: named %v, want %v", c.quiet, c.lag, c.here, got, c.want)
		}
	}

	// runsHere tells a live collbench of this machine from a stopped one
	// and from another program.
	self := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test starts its own binary or a shell helper it wrote
	self.Env = append(os.Environ(), "CB_SLEEP=1")
	other := exec.Command("sleep", "30")
	for _, c := range []*exec.Cmd{self, other} {
		if err := c.Start(); err != nil {
			t.Skip("cannot start a process:", err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	tc := &TCP{pids: []int{os.Getpid(), self.Process.Pid, other.Process.Pid, 0}}
	if !tc.runsHere(0) {
		t.Error("this process does not run here")
	}
	if tc.runsHere(2) || tc.runsHere(3) || tc.runsHere(7) {
		t.Error("another program, or no process, was taken for a collbench")
	}
	if err := self.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tc.runsHere(1) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if tc.runsHere(1) {
		t.Error("a stopped process runs here")
	}
	_ = self.Process.Signal(syscall.SIGCONT)
}
