package bootstrap

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
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

	"collbench/internal/racebuild"
	"collbench/internal/secret"
)

// stranger connects to addr and tries to join as claim says; it returns
// what rank 0 answered ("" when it only closed the connection).
func stranger(t *testing.T, addr string, h hello, token []byte) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Errorf("stranger could not connect: %v", err)
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	typ, challenge, err := readFrame(c, maxHello)
	if err != nil || typ != frameChallenge {
		return ""
	}
	h.Nonce = secret.Nonce()
	if token != nil {
		h.Proof = secret.Proof(token, "collbench/hello", challenge, h.Nonce, h.Rank, h.Size)
		h.Secret = true
	}
	b, _ := json.Marshal(h)
	if err := writeFrameTo(c, frameHello, b); err != nil {
		return ""
	}
	typ, payload, err := readFrame(c, maxFrame)
	if err != nil {
		return ""
	}
	if typ == frameWelcome {
		return "WELCOMED"
	}
	return string(payload)
}

// TestStrangersNeverJoinOrBreakTheWorld runs a rendezvous with a secret
// while strangers of every kind knock: without the secret, with a wrong
// one, idle, announcing an oversized message, claiming a rank already
// taken, or a wrong world size. The world still forms, quickly, with
// exactly its own ranks.
func TestStrangersNeverJoinOrBreakTheWorld(t *testing.T) {
	addr := freeAddr(t)
	token := []byte("the-job-secret")
	args := []string{"allreduce", "--sizes", "8:1M"}
	opts := func(rank int) TCPOptions {
		return TCPOptions{Rank: rank, Size: 3, Addr: addr, Host: fmt.Sprintf("node%d", rank), Args: args, Timeout: 30 * time.Second, Token: token}
	}
	var refused []string
	var mu sync.Mutex
	var warned []string
	type joined struct {
		t   *TCP
		err error
	}
	res := make([]chan joined, 3)
	for i := range res {
		res[i] = make(chan joined, 1)
	}
	start := time.Now()
	go func() {
		o := opts(0)
		o.Warn = func(s string) { mu.Lock(); warned = append(warned, s); mu.Unlock() }
		tc, err := Join(context.Background(), o)
		res[0] <- joined{tc, err}
	}()
	waitListening(t, addr)

	// Idle connections and one that announces 64 MiB and sends nothing.
	var idle []net.Conn
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [5]byte
	hdr[0] = frameHello
	binary.LittleEndian.PutUint32(hdr[1:], 64<<20)
	_, _ = big.Write(hdr[:])
	defer big.Close()

	var wg sync.WaitGroup
	knock := func(h hello, tok []byte) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := stranger(t, addr, h, tok)
			mu.Lock()
			refused = append(refused, got)
			mu.Unlock()
		}()
	}
	knock(hello{Rank: 1, Size: 3, Host: "evil", Args: args}, nil)                           // no secret
	knock(hello{Rank: 2, Size: 3, Host: "evil", Args: args}, []byte("guess"))               // wrong secret
	knock(hello{Rank: 1, Size: 5, Host: "confused", Args: args}, token)                     // wrong world size
	knock(hello{Rank: 7, Size: 3, Host: "confused", Args: args}, token)                     // outside the world
	knock(hello{Rank: 2, Size: 3, Host: "evil", Args: []string{"collbench", "world"}}, nil) // no secret, other args
	wg.Wait()

	go func() { tc, err := Join(context.Background(), opts(1)); res[1] <- joined{tc, err} }()
	// A second process claiming rank 1, with the secret, once rank 1 is in.
	time.Sleep(300 * time.Millisecond)
	knock(hello{Rank: 1, Size: 3, Host: "twin", Args: args}, token)
	wg.Wait()
	go func() { tc, err := Join(context.Background(), opts(2)); res[2] <- joined{tc, err} }()

	var world []*TCP
	for r := range res {
		j := <-res[r]
		if j.err != nil {
			t.Fatalf("rank %d: %v", r, j.err)
		}
		world = append(world, j.t)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("strangers stalled the rendezvous: it took %v", took)
	}
	var ag sync.WaitGroup
	for r, tc := range world {
		ag.Add(1)
		go func() {
			defer ag.Done()
			all, err := tc.AllGather([]byte(fmt.Sprint("from ", r)))
			if err != nil || len(all) != 3 || string(all[2]) != "from 2" {
				t.Errorf("rank %d exchanged %q, %v", r, all, err)
			}
			if got := strings.Join(tc.Hosts(), ","); got != "node0,node1,node2" {
				t.Errorf("rank %d sees hosts %s", r, got)
			}
			tc.Close()
		}()
	}
	ag.Wait()
	if len(refused) != 6 {
		t.Fatalf("want 6 strangers answered, got %q", refused)
	}
	for _, r := range refused {
		if r == "WELCOMED" {
			t.Errorf("a stranger was welcomed: %q", refused)
		}
	}
	all := strings.Join(refused, " | ")
	for _, want := range []string{"no job secret", "wrong job secret", "world of 5 processes", "outside the world of 3", "already taken"} {
		if !strings.Contains(all, want) {
			t.Errorf("no refusal says %q: %s", want, all)
		}
	}
	if !strings.Contains(strings.Join(warned, "\n"), "refused") {
		t.Errorf("rank 0 did not log the refusals: %q", warned)
	}
}

// TestImpostorRankZeroIsRefused checks that a rank with the secret does not
// join a "rank 0" that cannot prove it holds the secret too.
func TestImpostorRankZeroIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = writeFrameTo(c, frameChallenge, secret.Nonce())
		_, _, _ = readFrame(c, maxHello)
		w, _ := json.Marshal(welcome{Parent: 0, Fanout: DefaultFanout})
		_ = writeFrameTo(c, frameWelcome, w)
		time.Sleep(time.Second)
	}()
	_, err = Join(context.Background(), TCPOptions{Rank: 1, Size: 2, Addr: ln.Addr().String(), Host: "b", Timeout: 5 * time.Second, Token: []byte("s")})
	if err == nil || !strings.Contains(err.Error(), "does not hold this job's secret") {
		t.Fatalf("joined an impostor: %v", err)
	}
}

// TestWarnsWithoutSecretOffLoopback checks the one-line warning rank 0
// prints when it serves a non-loopback address without a secret.
func TestWarnsWithoutSecretOffLoopback(t *testing.T) {
	ip := ""
	for a := range localIPs() {
		if p := net.ParseIP(a); p != nil && !p.IsLoopback() && p.To4() != nil {
			ip = a
		}
	}
	if ip == "" {
		t.Skip("this host has no non-loopback IPv4 address")
	}
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skip(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var warned []string
	_, err = Join(context.Background(), TCPOptions{Rank: 0, Size: 2, Addr: addr, Timeout: 200 * time.Millisecond,
		Warn: func(s string) { warned = append(warned, s) }})
	if err == nil || len(warned) != 1 || !strings.Contains(warned[0], "no job secret") || !strings.Contains(warned[0], secret.EnvToken) {
		t.Fatalf("err %v, warnings %q", err, warned)
	}
}

// TestRendezvousOf1024Members forms a world of 1024 in-process members.
func TestRendezvousOf1024Members(t *testing.T) {
	if testing.Short() {
		t.Skip("1,024 members: make test-long (make unit) runs it")
	}
	const n = 1024
	start := time.Now()
	worlds := formWorld(t, n, func(r int) TCPOptions {
		return TCPOptions{Host: fmt.Sprint("h", r%64), Timeout: 60 * time.Second}
	})
	took := time.Since(start)
	t.Logf("1024 members formed a world in %v", took)
	if took > 10*time.Second && !racebuild.Enabled {
		t.Errorf("the rendezvous of %d members took %v (want under 10 s)", n, took)
	}
	eachMember(worlds, func(w *TCP) {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
}

// waitListening waits until something accepts connections at addr.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			// A probe that says nothing is dropped by rank 0 on its own.
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens at %s", addr)
}

// TestStoppedRankIsNamed stops one process of a formed world with SIGSTOP:
// the heartbeat names it, with its host and pid, within the silence bound,
// on every other process.
func TestStoppedRankIsNamed(t *testing.T) {
	addr := freeAddr(t)
	const silence = 1500 * time.Millisecond
	type proc struct {
		cmd *exec.Cmd
		out *syncBuffer
	}
	var procs []proc
	for r := 0; r < 3; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test starts its own binary or a shell helper it wrote
		cmd.Env = append(os.Environ(), "CB_TEST_CHILD=1", fmt.Sprintf("CB_RANK=%d", r), "CB_SIZE=3", "CB_ADDR="+addr,
			"CB_TIMEOUT=10s", "CB_MODE=stop", "CB_SILENCE="+silence.String(), "CB_TOKEN=t")
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{cmd, out})
	}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range procs {
		for !strings.Contains(p.out.String(), "READY") {
			if time.Now().After(deadline) {
				t.Fatalf("world did not form: %q", p.out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := procs[2].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for r := 0; r < 2; r++ {
		done := make(chan error, 1)
		go func() { done <- procs[r].cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(silence + 10*time.Second):
			t.Fatalf("rank %d still waits %v after rank 2 stopped: %q", r, time.Since(stopped), procs[r].out.String())
		}
		out := procs[r].out.String()
		want := fmt.Sprintf("rank 2 (host1, pid %d) stopped answering", procs[2].cmd.Process.Pid)
		if !strings.Contains(out, want) {
			t.Errorf("rank %d: want %q, got %q", r, want, out)
		}
	}
	if took := time.Since(stopped); took > silence+5*time.Second {
		t.Errorf("named after %v (silence bound %v)", took, silence)
	}
	procs = procs[2:]
}

// TestStarvedRankIsNotNamed: a rank that is alive and running on this
// machine but sends nothing for twice the silence bound (starved on a loaded
// machine) is not named silent: rank 0 says the machine is loaded and the
// world goes on. (A stopped rank is still named at the bound, above.)
func TestStarvedRankIsNotNamed(t *testing.T) {
	addr := freeAddr(t)
	const silence = 1500 * time.Millisecond
	var outs []*syncBuffer
	var cmds []*exec.Cmd
	for r := 0; r < 3; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test starts its own binary or a shell helper it wrote
		cmd.Env = append(os.Environ(), "CB_TEST_CHILD=1", fmt.Sprintf("CB_RANK=%d", r), "CB_SIZE=3", "CB_ADDR="+addr,
			"CB_TIMEOUT=10s", "CB_MODE=mute", "CB_SILENCE="+silence.String(), "CB_TOKEN=t")
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		outs, cmds = append(outs, out), append(cmds, cmd)
	}
	for r, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil || !strings.Contains(outs[r].String(), "MUTE END: <nil>") {
				t.Errorf("rank %d: %v: %q", r, err, outs[r].String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("rank %d did not finish: %q", r, outs[r].String())
		}
	}
	if !strings.Contains(outs[0].String(), "LOADED rank 2") {
		t.Errorf("rank 0 did not say rank 2's machine is loaded: %q", outs[0].String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFloodOfIdleConnectionsCannotStopAWorld opens three times as many idle
// connections as the rendezvous holds handshakes for, before and while the
// ranks arrive: the world still forms, because the oldest unanswered
// handshakes are dropped first and a rank whose connection was cut before
// rank 0's greeting tries again. A rendezvous that times out under such a
// flood says so.
func TestFloodOfIdleConnectionsCannotStopAWorld(t *testing.T) {
	old := maxPending
	maxPending = 32
	defer func() { maxPending = old }()
	addr := freeAddr(t)
	args := []string{"world"}
	type joined struct {
		t   *TCP
		err error
	}
	res := make([]chan joined, 3)
	for r := range res {
		res[r] = make(chan joined, 1)
	}
	opts := func(r int) TCPOptions {
		return TCPOptions{Rank: r, Size: 3, Addr: addr, Host: fmt.Sprintf("node%d", r), Args: args, Timeout: 20 * time.Second, Token: []byte("s")}
	}
	go func() { tc, err := Join(context.Background(), opts(0)); res[0] <- joined{tc, err} }()
	waitListening(t, addr)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	flood := func(n int) {
		for i := 0; i < n; i++ {
			if c, err := net.Dial("tcp", addr); err == nil {
				idle = append(idle, c)
			}
		}
	}
	flood(3 * maxPending)
	for r := 1; r < 3; r++ {
		go func() { tc, err := Join(context.Background(), opts(r)); res[r] <- joined{tc, err} }()
	}
	flood(3 * maxPending)
	var world []*TCP
	for r := range res {
		select {
		case j := <-res[r]:
			if j.err != nil {
				t.Fatalf("rank %d: %v", r, j.err)
			}
			world = append(world, j.t)
		case <-time.After(30 * time.Second):
			t.Fatalf("rank %d never joined under the flood", r)
		}
	}
	var wg sync.WaitGroup
	for _, tc := range world {
		wg.Add(1)
		go func() { defer wg.Done(); tc.Close() }()
	}
	wg.Wait()

	// A world whose rank 1 never comes: the timeout names the flood.
	addr2 := freeAddr(t)
	errc := make(chan error, 1)
	go func() {
		o := TCPOptions{Rank: 0, Size: 2, Addr: addr2, Host: "node0", Args: args, Timeout: 2 * time.Second}
		_, err := Join(context.Background(), o)
		errc <- err
	}()
	waitListening(t, addr2)
	for i := 0; i < 2*maxPending; i++ {
		if c, err := net.Dial("tcp", addr2); err == nil {
			idle = append(idle, c)
		}
	}
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "rank 1 never arrived") || !strings.Contains(err.Error(), "sent no hello and were dropped (a flood") {
		t.Fatalf("the timeout does not name the flood: %v", err)
	}
}

// TestRendezvousAtScale measures a world of in-process members for each
// size in $COLLBENCH_RENDEZVOUS_SIZES (e.g. 1024,4096,8192; skipped when
// unset; make rendezvous-scale): how long it takes to form, how many
// connections rank 0 holds, and how long an allgather of 64 bytes from
// every member and the closing barrier take, and how many bytes rank 0
// sent for the allgather. Each member needs three descriptors in this one
// process (two ends of its link and a heartbeat socket); above 4,096
// members the heartbeat sockets are left out (the beats ride the links),
// so that 8,192 fit a limit of 20,000.
func TestRendezvousAtScale(t *testing.T) {
	for _, n := range rendezvousSizes(t, "to measure the rendezvous at scale (make rendezvous-scale)") {
		beatPathOff = n > 4096
		start := time.Now()
		worlds := formWorld(t, n, func(r int) TCPOptions {
			return TCPOptions{Host: fmt.Sprint("h", r/8), Timeout: 5 * time.Minute, Silence: time.Minute}
		})
		beatPathOff = false
		formed := time.Since(start)
		held, most := len(worlds[0].links()), 0
		for _, w := range worlds {
			most = max(most, len(w.links()))
		}
		sent := func() (b int64) {
			for _, p := range worlds[0].links() {
				b += p.sent.Load()
			}
			return b
		}
		before := sent()
		payload := make([]byte, 64)
		start = time.Now()
		eachMember(worlds, func(w *TCP) {
			if _, err := w.AllGather(payload); err != nil {
				t.Error(err)
			}
		})
		gathered := time.Since(start)
		rootSent := sent() - before
		start = time.Now()
		eachMember(worlds, func(w *TCP) {
			if err := w.Close(); err != nil {
				t.Error(err)
			}
		})
		t.Logf("%d members: formed in %.2f s; rank 0 holds %d connections, the busiest member %d; allgather of 64 B each %.2f s, rank 0 sent %.1f MB for it; close %.2f s",
			n, formed.Seconds(), held, most, gathered.Seconds(), float64(rootSent)/1e6, time.Since(start).Seconds())
	}
}

// TestRendezvousRootCost runs rank 0 in a process of its own and the
// other members of a world in this one, for each size in
// $COLLBENCH_RENDEZVOUS_SIZES (make rendezvous-scale), and reports what
// rank 0 alone spent: wall and CPU seconds to form the world and for an
// allgather of 64 bytes from each member, and its peak memory.
func TestRendezvousRootCost(t *testing.T) {
	for _, n := range rendezvousSizes(t, "to measure rank 0's cost (make rendezvous-scale)") {
		addr := freeAddr(t)
		root := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test starts its own binary
		root.Env = append(os.Environ(), "CB_TEST_CHILD=1", "CB_RANK=0", fmt.Sprint("CB_SIZE=", n), "CB_ADDR="+addr, "CB_TIMEOUT=5m", "CB_MODE=cost")
		out := &syncBuffer{}
		root.Stdout, root.Stderr = out, out
		if err := root.Start(); err != nil {
			t.Fatal(err)
		}
		beatPathOff = n > 4096
		members := make([]*TCP, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := 1; r < n; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				members[r], errs[r] = Join(context.Background(), TCPOptions{Rank: r, Size: n, Addr: addr, Host: fmt.Sprint("h", r/8),
					Args: []string{"cost"}, Timeout: 5 * time.Minute, Token: []byte("k"), Silence: time.Minute})
				if errs[r] == nil {
					_, errs[r] = members[r].AllGather(make([]byte, 64))
				}
				if errs[r] == nil {
					errs[r] = members[r].Close()
				}
			}()
		}
		wg.Wait()
		beatPathOff = false
		werr := root.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%d members: rank %d: %v", n, r, err)
			}
		}
		if werr != nil {
			t.Fatalf("%d members: rank 0: %v\n%s", n, werr, out.String())
		}
		var jw, jc, gw, gc float64
		var rss int64
		for _, line := range strings.Split(out.String(), "\n") {
			_, _ = fmt.Sscanf(line, "COST joined %g %g", &jw, &jc)
			_, _ = fmt.Sscanf(line, "COST gathered %g %g", &gw, &gc)
			_, _ = fmt.Sscanf(line, "COST maxrss %d", &rss)
		}
		if rss == 0 {
			t.Fatalf("%d members: rank 0 said %q", n, out.String())
		}
		t.Logf("%d members: rank 0 formed the world in %.2f s wall, %.2f s CPU; allgather of 64 B each %.2f s wall, %.2f s CPU; peak memory %.0f MiB",
			n, jw, jc, gw, gc, float64(rss)/1024)
	}
}

// formWorld joins n in-process members at a free address with one job
// secret, each with the options opts gives its rank (rank, size, address
// and token are set here), and fails the test if any could not join.
func formWorld(t *testing.T, n int, opts func(r int) TCPOptions) []*TCP {
	t.Helper()
	addr := freeAddr(t)
	worlds := make([]*TCP, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts(r)
			o.Rank, o.Size, o.Addr, o.Token = r, n, addr, []byte("k")
			worlds[r], errs[r] = Join(context.Background(), o)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%d members: rank %d: %v", n, r, err)
		}
	}
	return worlds
}

// eachMember runs f for every member at once and waits for all of them.
func eachMember(worlds []*TCP, f func(w *TCP)) {
	var wg sync.WaitGroup
	for _, w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(w)
		}()
	}
	wg.Wait()
}

// rendezvousSizes reads the world sizes of $COLLBENCH_RENDEZVOUS_SIZES,
// skipping the test (saying why it would run) when it is unset.
func rendezvousSizes(t *testing.T, why string) []int {
	t.Helper()
	spec := os.Getenv("COLLBENCH_RENDEZVOUS_SIZES")
	if spec == "" {
		t.Skip("set COLLBENCH_RENDEZVOUS_SIZES=1024,4096,8192 " + why)
	}
	var out []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			t.Fatalf("COLLBENCH_RENDEZVOUS_SIZES: %q is not a world size", f)
		}
		out = append(out, n)
	}
	return out
}
