package cpu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"collbench/internal/golden"

	"collbench/dtype"
	"collbench/measure"
)

// TestRootedAndVariableGolden records where every element of gather,
// scatter and alltoallv lands, for every type, on three ranks in one
// process and across three processes: the outputs are read back element by
// element and written out, so a change in placement or conversion shows in
// the golden file, and each output is also verified against the
// expectation.
func TestRootedAndVariableGolden(t *testing.T) {
	colls := []measure.Collective{measure.Gather, measure.Scatter, measure.AllToAllV}
	const n, root = 3, 1
	var b bytes.Buffer
	for _, c := range colls {
		for _, ty := range dtype.All() {
			esz := ty.Size()
			size := int64(12 * esz) // the row size: 4 elements per rank for gather and scatter
			if c == measure.AllToAllV {
				size = n * 32 // 32 bytes per peer on average: alltoallv's parts are whole 16 bytes
			}
			fmt.Fprintf(&b, "%s %s, %d ranks, root %d, size %d B\n", c, ty, n, root, size)
			inProc := outputs(t, c, ty, n, root, size, false)
			across := outputs(t, c, ty, n, root, size, true)
			for r := 0; r < n; r++ {
				if inProc[r] != across[r] {
					t.Errorf("%s %s rank %d: in one process %s, across processes %s", c, ty, r, inProc[r], across[r])
				}
				fmt.Fprintf(&b, "  rank %d: %s\n", r, inProc[r])
			}
		}
	}
	path := filepath.Join("testdata", "rooted-and-variable.golden")
	if golden.Update() {
		if err := os.MkdirAll("testdata", 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("outputs differ from %s; got:\n%s", path, b.Bytes())
	}
}

// outputs runs one call of c on n ranks and returns each rank's output
// elements as text ("-" where the collective defines none).
func outputs(t *testing.T, c measure.Collective, ty dtype.DType, n, root int, size int64, distributed bool) []string {
	t.Helper()
	out := make([]string, n)
	body := func(ctx context.Context, w measure.World) error {
		return w.Run(func(r measure.Rank) error {
			esz := ty.Size()
			g := measure.GeometryFor(c, size, esz, n, r.Rank())
			dom := measure.DomainFor(c, ty, measure.Sum, n)
			e := measure.Expectation{Coll: c, DType: ty, Op: measure.Sum, Root: root, Ranks: n, Rank: r.Rank(), Geom: g, Domain: dom, Seed: 7}
			send, err := r.Alloc(max(g.SendCount, 1) * int64(esz))
			if err != nil {
				return err
			}
			recv, err := r.Alloc(max(g.RecvCount, 1) * int64(esz))
			if err != nil {
				return err
			}
			if err := r.Fill(measure.View{Buf: send}, g.SendCount, e.InputPattern(r.Rank())); err != nil {
				return err
			}
			if err := r.Poison(measure.View{Buf: recv}, g.RecvCount, ty); err != nil {
				return err
			}
			call := measure.Call{Coll: c, DType: ty, Op: measure.Sum, Root: root, Count: g.Count, Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}}
			if err := r.Launch(call); err != nil {
				return err
			}
			if err := r.Sync(); err != nil {
				return err
			}
			if !e.Checked() {
				out[r.WorldRank()] = "-"
				return nil
			}
			wrong, err := r.Check(measure.View{Buf: recv}, e)
			if err != nil {
				return err
			}
			if wrong != 0 {
				return fmt.Errorf("rank %d: %d wrong elements", r.Rank(), wrong)
			}
			raw, err := r.(measure.HostReader).ReadHost(measure.View{Buf: recv}, e.OutputCount()*int64(esz))
			if err != nil {
				return err
			}
			var vals []string
			for i := int64(0); i < e.OutputCount(); i++ {
				vals = append(vals, strconv.FormatFloat(ty.Get(raw, i), 'f', -1, 64))
			}
			out[r.WorldRank()] = "[" + strings.Join(vals, " ") + "]"
			return nil
		})
	}
	if !distributed {
		w, err := New(Options{}).Open(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := body(context.Background(), w); err != nil {
			t.Fatalf("%s %s: %v", c, ty, err)
		}
		return out
	}
	for r, err := range distRun(t, n, Options{}, nil, body) {
		if err != nil {
			t.Fatalf("%s %s rank %d: %v", c, ty, r, err)
		}
	}
	return out
}
