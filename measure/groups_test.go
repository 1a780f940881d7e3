package measure

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseLayoutLists(t *testing.T) {
	cases := []struct {
		spec string
		n    int
		want [][]int
	}{
		{"", 4, [][]int{{0, 1, 2, 3}}},
		{"all", 3, [][]int{{0, 1, 2}}},
		{"[[0,1],[2,3]]", 4, [][]int{{0, 1}, {2, 3}}},
		{" [ [0, 1, 2] , [3] ] ", 4, [][]int{{0, 1, 2}, {3}}},
		{"[[1,2,3],[0]]", 4, [][]int{{1, 2, 3}, {0}}},
		{"[[3,1]]", 4, [][]int{{3, 1}, {0}, {2}}}, // unlisted ranks run alone, in rank order
		{"[[0]]", 1, [][]int{{0}}},
	}
	for _, c := range cases {
		l, err := ParseLayout(c.spec, c.n, nil)
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if !reflect.DeepEqual(l.Groups, c.want) {
			t.Errorf("%q: got %v, want %v", c.spec, l.Groups, c.want)
		}
	}
}

func TestParseLayoutRejects(t *testing.T) {
	cases := map[string]string{
		"[[0,1],[1,2]]":              "rank 1 appears in groups 0 and 1",
		"[[0,0]]":                    "rank 0 appears twice in group 0",
		"[[0,4]]":                    "rank 4 in group 0 is outside the world of 4 ranks (0-3)",
		"[[0,-1]]":                   "rank -1 in group 0 is negative",
		"[[0,1],[]]":                 "group 1 is empty",
		"[[0,1],[2,3]":               "expected ',' or ']' but the text ended",
		"[[0,1]] x":                  "unexpected 'x' after the list at position 9",
		"[[0,a]]":                    "expected a rank number, found 'a' at position 5",
		"[[0,99999999999999999999]]": "rank number 99999999999999999999 is too large at position 5",
		"[]":                         "no groups",
		"[0,1]":                      "expected '[', found '0' at position 2",
		"[[0;1]]":                    "expected ',' or ']', found ';'",
		"bananas":                    "not a list such as [[0,1],[2,3]] nor a preset",
		"mod:0":                      "\"0\" is not a valid mod value",
		"stride":                     "stride needs a number",
		"div:x":                      "\"x\" is not a valid div value",
		"[[99999999999]]":            "outside the world of 4 ranks",
	}
	for spec, want := range cases {
		_, err := ParseLayout(spec, 4, nil)
		if err == nil {
			t.Errorf("%q accepted", spec)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q does not mention %q", spec, err, want)
		}
	}
}

func TestPresets(t *testing.T) {
	hosts := []string{"a", "a", "a", "a", "b", "b", "b", "b"}
	cases := map[string][][]int{
		"pairs":      {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
		"halves":     {{0, 1, 2, 3}, {4, 5, 6, 7}},
		"singletons": {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
		"node":       {{0, 1, 2, 3}, {4, 5, 6, 7}},
		"cross-node": {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
		"stride:4":   {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
		"mod:2":      {{0, 2, 4, 6}, {1, 3, 5, 7}},
		"div:4":      {{0, 1, 2, 3}, {4, 5, 6, 7}},
		"and:1":      {{0, 2, 4, 6}, {1, 3, 5, 7}},
		"or:3":       {{0, 1, 2, 3}, {4, 5, 6, 7}},
		"and:0x6":    {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
	}
	for spec, want := range cases {
		l, err := ParseLayout(spec, 8, hosts)
		if err != nil {
			t.Errorf("%s: %v", spec, err)
			continue
		}
		if !reflect.DeepEqual(l.Groups, want) {
			t.Errorf("%s: got %v, want %v", spec, l.Groups, want)
		}
	}
	// Odd world: pairs leaves the last rank alone; halves rounds up.
	l, _ := ParseLayout("pairs", 5, nil)
	if !reflect.DeepEqual(l.Groups, [][]int{{0, 1}, {2, 3}, {4}}) {
		t.Errorf("pairs of 5: %v", l.Groups)
	}
	l, _ = ParseLayout("halves", 5, nil)
	if !reflect.DeepEqual(l.Groups, [][]int{{0, 1, 2}, {3, 4}}) {
		t.Errorf("halves of 5: %v", l.Groups)
	}
}

// TestCommInfo checks the example of measurement.md: [[1,2,3],[0]] on two
// hosts of two GPUs.
func TestCommInfo(t *testing.T) {
	l, err := ParseLayout("[[1,2,3],[0]]", 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"h0", "h0", "h1", "h1"}
	type want struct{ group, rank, size, local, localSize int }
	wants := []want{{1, 0, 1, 0, 1}, {0, 0, 3, 0, 1}, {0, 1, 3, 0, 2}, {0, 2, 3, 1, 2}}
	for r, w := range wants {
		in := l.Info(r, hosts)
		got := want{in.GroupID, in.Rank, in.Size, in.LocalRank, in.LocalSize}
		if got != w || in.GroupSize != 2 || in.WorldRank != r || in.WorldSize != 4 || in.Host != hosts[r] { //nolint:gosec // the table's rows all have these fields
			t.Errorf("rank %d: got %+v (%+v), want %+v", r, got, in, w)
		}
	}
	if l.String() != "[[1,2,3],[0]]" {
		t.Errorf("String() = %s", l.String())
	}
}

func TestDefaultLayouts(t *testing.T) {
	var names []string
	for _, l := range DefaultLayouts(4, []string{"a", "a", "a", "a"}) {
		names = append(names, l.Spec+"="+l.String())
	}
	want := []string{"all=[[0,1,2,3]]", "pairs = halves=[[0,1],[2,3]]", "uneven=[[0,1,2],[3]]", "reversed=[[1,2,3],[0]]",
		"interleaved=[[0,2],[1,3]]", "singletons=[[0],[1],[2],[3]]"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("got %v\nwant %v", names, want)
	}
	names = nil
	for _, l := range DefaultLayouts(4, []string{"a", "a", "b", "b"}) {
		names = append(names, l.Spec+"="+l.String())
	}
	want = []string{"all=[[0,1,2,3]]", "node = pairs = halves=[[0,1],[2,3]]", "cross-node = interleaved=[[0,2],[1,3]]", "uneven=[[0,1,2],[3]]",
		"reversed=[[1,2,3],[0]]", "singletons=[[0],[1],[2],[3]]"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("several hosts: got %v\nwant %v", names, want)
	}
}

// TestPositionsAgreeWithLocate: the one-pass map places every rank of every
// preset and list where Locate does, and holds no other rank.
func TestPositionsAgreeWithLocate(t *testing.T) {
	hosts := []string{"a", "a", "a", "a", "b", "b", "b", "b"}
	for _, spec := range []string{"", "pairs", "halves", "node", "cross-node", "stride:2", "singletons", "[[3,1],[6,0,5]]", "[[7,6,5,4,3,2,1,0]]"} {
		l, err := ParseLayout(spec, len(hosts), hosts)
		if err != nil {
			t.Fatalf("%q: %v", spec, err)
		}
		pos := l.Positions()
		if len(pos) != len(hosts) {
			t.Errorf("%q: %d ranks placed, want %d", spec, len(pos), len(hosts))
		}
		for r := range hosts {
			g, i := l.Locate(r)
			if got, ok := pos[r]; !ok || got != [2]int{g, i} {
				t.Errorf("%q rank %d: Positions %v (held %v), Locate group %d index %d", spec, r, got, ok, g, i)
			}
		}
	}
}
