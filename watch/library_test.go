package watch

import (
	"fmt"
	"strings"
	"testing"
)

// TestLibrariesAreCountedWithinBounds: each admitted process's library is
// counted by name; past MaxLibraries names the rest count as "others", and
// a name is cut at its bound, so a job of any size holds a small list;
// the record's line names the one library, or each with its processes.
func TestLibrariesAreCountedWithinBounds(t *testing.T) {
	s := &Server{}
	for i := range 1000 {
		s.countLibrary(fmt.Sprintf("NCCL 2.30.%d (/lib/libnccl.so.2), profiler interface v5", i%40))
	}
	s.countLibrary("")
	s.countLibrary(strings.Repeat("x", 1000))
	var total int64
	for _, l := range s.libraries {
		total += l.Processes
		if len(l.Library) > maxLibrary {
			t.Errorf("a name of %d bytes kept", len(l.Library))
		}
	}
	if len(s.libraries) != MaxLibraries || total != 1001 || s.libraries[MaxLibraries-1].Library != "others" {
		t.Errorf("%d names, %d processes, last %q: want %d names, 1001 processes, the last others", len(s.libraries), total, s.libraries[len(s.libraries)-1].Library, MaxLibraries)
	}
	one := Counts{Processes: 4, Libraries: []LibraryCount{{Library: "NCCL 2.30.7 (/x/libnccl.so.2), profiler interface v5", Processes: 4}}}
	if got := one.String(); !strings.Contains(got, "; every process on NCCL 2.30.7 (/x/libnccl.so.2), profiler interface v5") {
		t.Errorf("one library: %s", got)
	}
	two := Counts{Processes: 4, Libraries: []LibraryCount{{Library: "NCCL 2.30.7", Processes: 3}, {Library: "NCCL 2.28.9", Processes: 1}}}
	if got := two.String(); !strings.Contains(got, "; libraries: NCCL 2.30.7 (3 processes), NCCL 2.28.9 (1 process)") {
		t.Errorf("two libraries: %s", got)
	}
}
