package bootstrap

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// TestBeatPathSignsAndOrders: a beat of this job is taken once, in order;
// one signed with another secret, a replay, a malformed datagram or one
// claiming this rank is dropped; without a secret beats are unsigned.
func TestBeatPathSignsAndOrders(t *testing.T) {
	open := func(token []byte, me int) *beatPath {
		b, err := openBeatPath("127.0.0.1", token, me, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.close)
		return b
	}
	datagram := func(b *beatPath) []byte {
		var got []byte
		peer := open(nil, 3)
		b.watch(3, &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, peer.port())
		b.send()
		buf := make([]byte, 64)
		_ = peer.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := peer.conn.ReadFromUDP(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		return got
	}
	rank2 := open([]byte("job"), 2)
	first, second := datagram(rank2), datagram(rank2)
	rank0 := open([]byte("job"), 0)
	if r := rank0.accept(second); r != 2 {
		t.Fatalf("a beat of this job: sender %d, want 2", r)
	}
	if r := rank0.accept(first); r != -1 {
		t.Error("an older beat was taken after a newer one")
	}
	if r := rank0.accept(second); r != -1 {
		t.Error("a replayed beat was taken")
	}
	other := open([]byte("another job"), 0)
	if r := other.accept(datagram(rank2)); r != -1 {
		t.Error("a beat signed with another secret was taken")
	}
	if r := rank0.accept([]byte("CBHB")); r != -1 {
		t.Error("a short datagram was taken")
	}
	if r := rank2.accept(datagram(open([]byte("job"), 2))); r != -1 {
		t.Error("a beat claiming this process's own rank was taken")
	}
	if r := open(nil, 0).accept(datagram(open(nil, 1))); r != 1 {
		t.Error("an unsigned beat was refused without a secret")
	}
}

// TestBeatsTravelApartFromTheControlConnection: in a formed world every
// rank hears the ranks it watches (rank 0 every rank, the others rank 0)
// on the beat path.
func TestBeatsTravelApartFromTheControlConnection(t *testing.T) {
	addr := freeAddr(t)
	ts := make([]*TCP, 3)
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			ts[r], err = Join(context.Background(), TCPOptions{Rank: r, Size: 3, Addr: addr, Host: "h", Timeout: 10 * time.Second, Token: []byte("t")})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	defer func() {
		// Close is collective: every rank at once.
		var cw sync.WaitGroup
		for _, x := range ts {
			if x != nil {
				cw.Add(1)
				go func() { defer cw.Done(); _ = x.Close() }()
			}
		}
		cw.Wait()
	}()
	if t.Failed() {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	heardAll := func() bool {
		return ts[0].beats.heardFrom(1) && ts[0].beats.heardFrom(2) && ts[1].beats.heardFrom(0) && ts[2].beats.heardFrom(0)
	}
	for time.Now().Before(deadline) && !heardAll() {
		time.Sleep(50 * time.Millisecond)
	}
	for r, x := range ts {
		for _, w := range map[int][]int{0: {1, 2}, 1: {0}, 2: {0}}[r] {
			if !x.beats.heardFrom(w) {
				t.Errorf("rank %d never heard rank %d on the beat path", r, w)
			}
		}
	}
}
