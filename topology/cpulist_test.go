package topology

import (
	"strings"
	"testing"
)

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		n       int
		err     string
	}{
		{"0-15,32-47", "0-15,32-47", 32, ""},
		{"3", "3", 1, ""},
		{"", "", 0, ""},
		{" 0-1,1-2,7 \n", "0-2,7", 4, ""},
		{"4,2,3", "2-4", 3, ""},
		{"0-", "", 0, `"0-" is not a CPU`},
		{"5-2", "", 0, `"5-2" is not a CPU`},
		{"a", "", 0, `invalid CPU list "a"`},
		{"-1", "", 0, `"-1" is not a CPU`},
	} {
		cpus, err := ParseCPUList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(cpus) != tc.n || FormatCPUList(cpus) != tc.out {
			t.Errorf("%q: %v (%s), %v; want %d CPUs, %q", tc.in, cpus, FormatCPUList(cpus), err, tc.n, tc.out)
		}
	}
	if s := FormatCPUList([]int{9, 1, 0, 2, 5}); s != "0-2,5,9" {
		t.Errorf("format: %s", s)
	}
}
