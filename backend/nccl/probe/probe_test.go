package probe

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"collbench/bootstrap"
	"collbench/measure"
)

func TestProbeFrames(t *testing.T) {
	var b bytes.Buffer
	parts := [][]byte{[]byte("a"), nil, {}, bytes.Repeat([]byte("x"), 1000)}
	if err := bootstrap.WriteFrame(&b, frameData, encodeParts(parts)); err != nil {
		t.Fatal(err)
	}
	typ, p, err := bootstrap.ReadFrame(&b, maxFrameBytes)
	if err != nil || typ != frameData {
		t.Fatalf("read %q %v", typ, err)
	}
	got, err := decodeParts(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || string(got[0]) != "a" || got[1] != nil || got[2] == nil || len(got[3]) != 1000 {
		t.Fatalf("parts came back as %q", got)
	}
	// Damaged input is an error, never a panic.
	for _, bad := range [][]byte{nil, {0, 0, 0, 9}, {0, 0, 0, 1, 0, 0, 0, 50, 1}} {
		if _, err := decodeParts(bad); err == nil {
			t.Errorf("decodeParts(%v) accepted it", bad)
		}
	}
	var big bytes.Buffer
	big.Write([]byte{frameData})
	_ = binary.Write(&big, binary.BigEndian, uint32(maxFrameBytes+1))
	if _, _, err := bootstrap.ReadFrame(&big, maxFrameBytes); err == nil {
		t.Error("a frame over the limit was read")
	}
}

func TestDescribeStage(t *testing.T) {
	spec := Spec{Cases: []measure.Case{{Coll: measure.AllReduce}, {Coll: measure.Broadcast}}, Plan: measure.Plan{Sizes: []int64{1024, 1 << 20}}}
	for stage, want := range map[int]string{
		stageStarting: "while opening its communicators",
		stageOpen:     "before its first operation",
		0:             "at row 1 of 4, allreduce 1.0 KiB",
		3:             "at row 4 of 4, broadcast 1.0 MiB",
	} {
		if got := describeStage(stage, spec); got != want {
			t.Errorf("stage %d: %q, want %q", stage, got, want)
		}
	}
}

// fakeWorld is an in-process world of n ranks for Run: lock-step
// allgathers, and notices.
type fakeWorld struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	round int
	cur   [][]byte
	have  int
	done  map[int][][]byte
	calls []int // allgathers per rank
	heard map[string]chan struct{}
}

func newFakeWorld(n int) *fakeWorld {
	w := &fakeWorld{n: n, done: map[int][][]byte{}, calls: make([]int, n), heard: map[string]chan struct{}{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

type fakeCtl struct {
	w    *fakeWorld
	rank int
}

func (c fakeCtl) Rank() int         { return c.rank }
func (c fakeCtl) Size() int         { return c.w.n }
func (c fakeCtl) Hosts() []string   { return make([]string, c.w.n) }
func (c fakeCtl) Abort(error)       {}
func (c fakeCtl) Close() error      { return nil }
func (c fakeCtl) Notice(key string) { close(c.chanOf(key)) }

func (c fakeCtl) chanOf(key string) chan struct{} {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	ch := c.w.heard[key]
	if ch == nil {
		ch = make(chan struct{})
		c.w.heard[key] = ch
	}
	return ch
}

func (c fakeCtl) Noticed(key string) <-chan struct{} { return c.chanOf(key) }

func (c fakeCtl) AllGather(d []byte) ([][]byte, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls[c.rank]++
	my := w.round
	if w.cur == nil {
		w.cur = make([][]byte, w.n)
	}
	w.cur[c.rank] = d
	if w.have++; w.have == w.n {
		w.done[my], w.cur, w.have = w.cur, nil, 0
		w.round++
		w.cond.Broadcast()
	}
	for w.round == my {
		w.cond.Wait()
	}
	return w.done[my], nil
}

func (c fakeCtl) Gather(d []byte) ([][]byte, error) {
	all, err := c.AllGather(d)
	if c.rank != 0 {
		return nil, err
	}
	return all, err
}

// TestARankWhoseProbeEndsJoinsTheLastRound: rank 0's probe child cannot
// start, or reports a failure (an abort frame) and exits; rank 1's starts
// and then waits, as an NCCL child waits for a peer that never comes. Rank
// 0 tells the world and joins the last round; rank 1 stops its child on
// the word. Each made exactly one exchange, so the run's exchanges after
// the probe stay in step, and both name rank 0.
func TestARankWhoseProbeEndsJoinsTheLastRound(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil { //nolint:gosec // a test's own script
			t.Fatal(err)
		}
		return path
	}
	held := script("held", "exec sleep 60")
	for _, c := range []struct {
		name, exe, want string
	}{
		{"never started", filepath.Join(dir, "missing"), "the probe ended on rank 0: starting it"},
		// Once its work came (a frame's 5-byte head read from fd 3), an
		// abort frame: type X, a 4-byte little-endian length, "boom!".
		{"reported a failure", script("aborts", `head -c 5 <&3 > /dev/null; printf 'X\005\000\000\000boom!' >&4; exit 1`), "the probe ended on rank 0: boom!"},
	} {
		w := newFakeWorld(2)
		type out struct {
			err  error
			took time.Duration
		}
		res := make(chan out, 2)
		start := time.Now()
		for r, exe := range []string{c.exe, held} {
			go func() {
				_, err := Run(context.Background(), fakeCtl{w, r}, exe, nil, Spec{Rank: r, Size: 2, Multi: true}, 40*time.Second)
				res <- out{err, time.Since(start)}
			}()
		}
		for range 2 {
			select {
			case o := <-res:
				if o.err == nil || !strings.Contains(o.err.Error(), c.want) {
					t.Errorf("%s: error %v, want %q", c.name, o.err, c.want)
				}
				if o.took > 20*time.Second {
					t.Errorf("%s: ended after %v: the waiting rank was not told", c.name, o.took)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: a rank still in its probe after 60 s: one left without the last round", c.name)
			}
		}
		if w.calls[0] != 1 || w.calls[1] != 1 {
			t.Errorf("%s: exchanges per rank %v, want one each", c.name, w.calls)
		}
	}
}
