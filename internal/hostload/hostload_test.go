package hostload

import (
	"strconv"
	"testing"
)

func TestSinceCountsOthersAndSteal(t *testing.T) {
	self := func(u, k int) string {
		return "42 (a (b) c) R 1 1 1 0 -1 4194304 100 0 0 0 " + strconv.Itoa(u) + " " + strconv.Itoa(k) + " 0 0 20 0 4 0"
	}
	a := parse("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3\n", self(50, 50))
	// 1,000 ticks later: busy 400 (this process 100 of it), idle 500,
	// steal 100.
	b := parse("cpu  300 0 300 1300 0 0 0 100 0 0\n", self(100, 100))
	l, ok := Since(a, b)
	if !ok || l.OthersPct != 30 || l.StealPct != 10 {
		t.Fatalf("got %+v %v, want others 30%% steal 10%%", l, ok)
	}
	if _, ok := Since(Sample{}, b); ok {
		t.Fatal("an empty sample measured something")
	}
	if s := parse("intr 1 2\n", self(1, 1)); s.ok {
		t.Fatal("a /proc/stat without its cpu line parsed")
	}
	if s := Take(); !s.ok {
		t.Skip("no /proc here")
	}
}
