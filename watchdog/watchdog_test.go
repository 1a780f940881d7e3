package watchdog

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func rec(rank int, ops int64, p Phase, wait int, quiet time.Duration) Record {
	return Record{Rank: rank, Ops: ops, What: "allreduce float sum 1 GiB out-of-place", Phase: p, Iter: 412, Iters: 1000,
		Wait: wait, QuietMS: quiet.Milliseconds()}
}

func issuing(r Record, ranks ...int) Record {
	r.IssuingFor = ranks
	return r
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
		{"a rank stuck issuing names no GPU waiting on the stream", []Record{rec(0, 5, Timed, WaitingAll, long), rec(1, 5, Timed, WaitingAll, long),
			rec(2, 5, Timed, NotWaiting, long), rec(3, 5, Timed, WaitingAll, long)}, []int{2}, []int{0, 1, 3}, "rank 2 (b, GPU 0000:07:00.0) has not finished"},
		{"every GPU on streams: all named", []Record{rec(0, 5, Timed, WaitingAll, long), rec(1, 5, Timed, WaitingAll, long)},
			[]int{0, 1}, nil, "rank 0 (a), rank 1 (a) have not finished"},
		{"one thread issuing for several GPUs names them all", []Record{issuing(rec(1, 5, Check, NotWaiting, long), 1, 2, 3),
			rec(2, 5, Check, 1, long), rec(3, 5, Check, 1, long), rec(0, 6, Barrier, WaitingAll, long)}, []int{1, 2, 3}, []int{0},
			"rank 1 (a), rank 2 (b, GPU 0000:07:00.0), rank 3 (b) have not finished the check of allreduce float sum 1 GiB out-of-place after 1m1s; rank 0 is waiting for them; one thread, rank 1's, issues the operations of ranks 1, 2, 3 and has not returned from the communication library"},
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
	// A backend's marks of a step: whom it waits for, and the ranks its
	// thread issues for, travel in the payload but are not progress.
	before := tr.Snapshot(time.Now()).Quiet()
	ranks := []int{3, 4}
	tr.Awaits(WaitingAll)
	tr.Issuing(&ranks)
	recs, err = Decode(b.Encode(time.Now()), 0)
	if err != nil || recs[0].Wait != WaitingAll || !slices.Equal(recs[0].IssuingFor, ranks) || recs[0].Quiet() < before {
		t.Fatalf("marked record %+v (quiet before %v), %v", recs[0], before, err)
	}
	tr.Issuing(nil)
	tr.Awaits(NotWaiting)
	if r := tr.Snapshot(time.Now()); r.IssuingFor != nil || r.Wait != NotWaiting {
		t.Fatalf("marks not cleared: %+v", r)
	}
	var nilTracker *Tracker
	nilTracker.Awaits(1)
	nilTracker.Issuing(&ranks)
	nilTracker.Op(1) // a run without a watchdog tracks nothing, and does not fail
	if BoardFrom(WithBoard(t.Context(), b)) != b {
		t.Fatal("board lost in the context")
	}
}
