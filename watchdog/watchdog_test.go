package watchdog

import (
	"strings"
	"testing"
	"time"
)

func rec(rank int, ops int64, p Phase, wait int, quiet time.Duration) Record {
	return Record{Rank: rank, Ops: ops, What: "allreduce float sum 1 GiB out-of-place", Phase: p, Iter: 412, Iters: 1000,
		Wait: wait, QuietMS: quiet.Milliseconds()}
}

func who(r int) string {
	return []string{"rank 0 (a)", "rank 1 (a)", "rank 2 (b, GPU 0000:07:00.0)", "rank 3 (b)"}[r]
}

func TestJudge(t *testing.T) {
	const bound = time.Minute
	long := 61 * time.Second
	cases := []struct {
		name    string
		recs    []Record
		stuck   []int
		waiting []int
		msg     string
	}{
		{"progress within the bound", []Record{rec(0, 5, Timed, 2, long), rec(1, 5, Timed, NotWaiting, 10*time.Second)}, nil, nil, ""},
		{"a hung rank and its waiters", []Record{rec(0, 5, Timed, 3, long), rec(1, 5, Barrier, WaitingAll, long),
			rec(2, 5, Timed, NotWaiting, long), rec(3, 5, Timed, 2, long)}, []int{2}, []int{0, 1, 3},
			"rank 2 (b, GPU 0000:07:00.0) has not finished allreduce float sum 1 GiB out-of-place iteration 412 of 1000 after 1m1s; ranks 0, 1, 3 are waiting for it"},
		{"GPU ranks: the one behind is stuck", []Record{rec(0, 9, Timed, NotWaiting, long), rec(1, 8, Timed, NotWaiting, long)},
			[]int{1}, []int{0}, "rank 1 (a) has not finished"},
		{"GPU ranks level: all named", []Record{rec(0, 8, Timed, NotWaiting, long), rec(1, 8, Timed, NotWaiting, long)},
			[]int{0, 1}, nil, "rank 0 (a), rank 1 (a) have not finished"},
		{"a wait chain ends at the stuck rank", []Record{rec(0, 5, Timed, 1, long), rec(1, 5, Timed, 3, long), rec(3, 5, Fill, WaitingAll, long)},
			[]int{3}, []int{0, 1}, "has not finished filling the inputs"},
		{"a cycle names its members", []Record{rec(0, 5, Timed, 1, long), rec(1, 5, Timed, 0, long)}, []int{0, 1}, nil, "have not finished"},
		{"a rank others wait for that sent no record is stuck", []Record{rec(0, 5, Idle, 3, long), rec(1, 6, Timed, 0, long),
			rec(2, 6, Idle, NotWaiting, long)}, []int{3}, []int{0, 1, 2}, "rank 3 (b) sent no record of its progress in 1m1s; ranks 0, 1, 2 are waiting for it"},
		{"finished ranks are not judged", []Record{rec(0, 5, Done, NotWaiting, long)}, nil, nil, ""},
	}
	for _, c := range cases {
		v := Judge(c.recs, bound, who)
		if c.stuck == nil {
			if v != nil {
				t.Errorf("%s: unexpected verdict %q", c.name, v.Msg)
			}
			continue
		}
		if v == nil {
			t.Errorf("%s: no verdict", c.name)
			continue
		}
		if strings.Join(strs(v.Stuck), ",") != strings.Join(strs(c.stuck), ",") || strings.Join(strs(v.Waiting), ",") != strings.Join(strs(c.waiting), ",") {
			t.Errorf("%s: stuck %v waiting %v, want %v and %v", c.name, v.Stuck, v.Waiting, c.stuck, c.waiting)
		}
		if !strings.Contains(v.Msg, c.msg) {
			t.Errorf("%s: message %q lacks %q", c.name, v.Msg, c.msg)
		}
	}
}

func strs(xs []int) []string {
	var out []string
	for _, x := range xs {
		out = append(out, string(rune('0'+x)))
	}
	return out
}

func TestTrackerAndHeartbeatPayload(t *testing.T) {
	b := NewBoard()
	tr := b.For(3)
	tr.Begin("sendrecv float 4 KiB out-of-place", Timed, 20)
	tr.Op(7)
	tr.Waiting(1)
	time.Sleep(20 * time.Millisecond)
	recs, err := Decode(b.Encode(time.Now()), 5*time.Second)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%v %v", recs, err)
	}
	r := recs[0]
	if r.Rank != 3 || r.Ops != 1 || r.Iter != 7 || r.Iters != 20 || r.Wait != 1 || r.Phase != Timed || r.Quiet() < 5*time.Second {
		t.Fatalf("record %+v", r)
	}
	var nilTracker *Tracker
	nilTracker.Op(1) // a run without a watchdog tracks nothing, and does not fail
	if BoardFrom(WithBoard(t.Context(), b)) != b {
		t.Fatal("board lost in the context")
	}
}
