package faults

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	s, err := Parse("hang:2@40; slow-link:1-3:20MB/s;delay-link:0-1:5ms;slow-rank:4:1GB/s;slow-host:node-b:500KB/s;corrupt:6")
	if err != nil {
		t.Fatal(err)
	}
	host := func(r int) string { return map[int]string{5: "node-b"}[r] }
	if at, ok := s.HangAt(2); !ok || at != 40 {
		t.Errorf("hang %d %v", at, ok)
	}
	if r := s.SendRate(3, 1, host); r != 20e6 {
		t.Errorf("slow link rate %v", r)
	}
	if r := s.SendRate(5, 0, host); r != 500e3 {
		t.Errorf("slow host rate %v", r)
	}
	if r := s.SendRate(0, 2, host); r != 0 {
		t.Errorf("healthy link rate %v", r)
	}
	if s.Delay(1, 0) != 5*time.Millisecond || !s.Corrupts(6) || s.Corrupts(5) {
		t.Error("delay or corruption")
	}
	var none *Set
	if _, ok := none.HangAt(0); ok || none.Corrupts(0) || none.SendRate(0, 1, host) != 0 {
		t.Error("a nil set plants something")
	}
	for _, bad := range []string{"hang", "hang:x", "slow-link:1:2MB/s", "slow-link:1-1:2MB/s", "slow-rank:1:fast", "delay-link:0-1:-1s", "melt:0"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), EnvFaults) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestThrottleKeepsTheRate(t *testing.T) {
	th := Throttle{Rate: 10e6}
	start := time.Now()
	for i := 0; i < 10; i++ {
		time.Sleep(th.Wait(100_000))
	}
	// 1 MB at 10 MB/s takes a tenth of a second. A sleep that overshoots is
	// not paid back, so on a loaded machine it may take longer; ten times
	// as long would mean the rate is not kept.
	if took := time.Since(start); took < 90*time.Millisecond || took > time.Second {
		t.Fatalf("1 MB at 10 MB/s took %v", took)
	}
	// A pause earns no credit: the next megabyte takes as long again.
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	for i := 0; i < 10; i++ {
		time.Sleep(th.Wait(100_000))
	}
	if took := time.Since(start); took < 90*time.Millisecond {
		t.Fatalf("after a pause, 1 MB at 10 MB/s took %v: idle time was banked", took)
	}
}
