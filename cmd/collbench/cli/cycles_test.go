package cli

import (
	"path/filepath"
	"testing"

	"collbench/results"
)

// TestCyclesKeepOneRowPerSize: --cycles measures every row again in each
// cycle; the results hold one row per size with every cycle in it, whether
// they go to -o (rewritten after every row of every cycle) or to standard
// output.
func TestCyclesKeepOneRowPerSize(t *testing.T) {
	args := []string{"allreduce", "--backend", "cpu", "-g", "2", "--sizes", "8,1K,64K", "-n", "2", "-w", "1", "--cycles", "3"}
	check := func(t *testing.T, d *results.Document) {
		t.Helper()
		if len(d.Results) != 3 {
			t.Fatalf("%d rows, want one per size (3)", len(d.Results))
		}
		for k, r := range d.Results {
			if want := []int64{8, 1 << 10, 64 << 10}[k]; r.SizeBytes != want {
				t.Errorf("row %d: %d B, want %d", k, r.SizeBytes, want)
			}
			for _, h := range []*results.Half{r.OutOfPlace, r.InPlace} {
				if h == nil || h.Cycles == nil || h.Cycles.N != 3 || len(h.Cycles.TimesUS) != 3 {
					t.Fatalf("row %d: cycles %+v, want all 3", k, h)
				}
			}
		}
	}
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "r.json")
		f, out, errOut := testFactory()
		if code := run(t, f, append(args, "-q", "-o", path)...); code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		check(t, readRows(t, path))
	})
	t.Run("stdout", func(t *testing.T) {
		f, out, errOut := testFactory()
		if code := run(t, f, append(args, "-q", "--format", "json")...); code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		d, err := results.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		check(t, d)
	})
}
