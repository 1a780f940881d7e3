package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"collbench/internal/golden"

	"collbench/internal/words"
	"collbench/results"
)

// groupedAtScale is an allreduce sweep of n ranks in groups of per, on
// hosts of 8 GPUs, with group 173 slow at every size and group 600
// returning wrong elements at 64 MiB.
func groupedAtScale(n, per int) *results.Document {
	d := sampleDocument()
	d.Config.Collectives = []string{"allreduce"}
	d.Config.Ranks = n
	d.Environment.Env = nil
	var groups [][]int
	for g := 0; g < n/per; g++ {
		var rs []int
		for k := 0; k < per; k++ {
			rs = append(rs, g*per+k)
		}
		groups = append(groups, rs)
	}
	d.Config.Groups = groups
	d.Config.RankList = words.GroupsFull(groups)
	d.Environment.Backend.Devices = nil
	for r := 0; r < n; r++ {
		d.Environment.Backend.Devices = append(d.Environment.Backend.Devices,
			results.Device{Rank: r, Name: "NVIDIA H200", BusID: fmt.Sprintf("0000:%02x:00.0", 0x18+(r%8)*0x10)})
	}
	d.Results = nil
	for _, size := range []int64{1 << 20, 64 << 20} {
		row := results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: size, Count: size / 4, Ranks: n}
		slowest := 0.0
		for id, rs := range groups {
			t := float64(size)/1e9*100 + 10 + float64(id%7)/10
			if id == 173 && len(groups) > 173 {
				t *= 1.8
			}
			h := &results.Half{TimeUS: t, AlgBW: float64(size) / t / 1e3, BusBW: float64(size) / t / 1e3 * 2 * float64(per-1) / float64(per), Wrong: wrong(0)}
			if id == 600 && size == 64<<20 && len(groups) > 600 {
				h.Wrong = wrong(12)
			}
			row.Groups = append(row.Groups, results.GroupResult{ID: id, Ranks: rs, SizeBytes: size, Count: size / 4, OutOfPlace: h})
			slowest = max(slowest, t)
		}
		row.OutOfPlace = &results.Half{TimeUS: slowest, AlgBW: float64(size) / slowest / 1e3 * float64(len(groups)), BusBW: 1, Wrong: wrong(0)}
		if len(groups) > 600 && size == 64<<20 {
			row.OutOfPlace.Wrong = wrong(12)
		}
		d.Results = append(d.Results, row)
	}
	return d
}

// TestGroupedTableAtScale renders the grouped table of 8 ranks (every
// group listed) and of 8,192 ranks in 1,024 groups: a few rows per size,
// the group with wrong elements and the slowest among them.
func TestGroupedTableAtScale(t *testing.T) {
	for _, c := range []struct {
		n, per int
		name   string
	}{{8, 2, "groups-8.table.golden"}, {8192, 8, "groups-8192.table.golden"}} {
		var b bytes.Buffer
		if err := WriteTable(&b, groupedAtScale(c.n, c.per)); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, c.name, b.Bytes())
		out := b.String()
		if lines := strings.Count(out, "\n"); lines > 40 {
			t.Errorf("%d ranks: %d lines", c.n, lines)
		}
		if c.n < 8192 {
			continue
		}
		for _, want := range []string{"173 [1384-1391] |", "600 [4800-4807] |", "1,024 groups of 8: [[0-7],[8-15]", "1,024 per size"} {
			if !strings.Contains(out, want) {
				t.Errorf("the table of 8,192 ranks lacks %q", want)
			}
		}
	}
}

// verifyAtScale is verify-groups over n ranks, 8 per host, in groups of
// per, with rank 173's allreduce and one collective wrong.
func verifyAtScale(n, per int) *results.GroupVerification {
	l := results.LayoutVerify{Name: "hosts"}
	groups := n / per
	for g := 0; g < groups; g++ {
		var rs []int
		for k := 0; k < per; k++ {
			rs = append(rs, g*per+k)
		}
		l.Groups = append(l.Groups, rs)
	}
	for r := 0; r < n; r++ {
		g, k := r/per, r%per
		l.Communicators = append(l.Communicators, results.CommInfo{WorldRank: r, WorldSize: n, Rank: k, Size: per, LocalRank: r % 8, LocalSize: 8,
			GroupID: g, GroupSize: groups, Host: fmt.Sprintf("node-%04d", r/8)})
		want := 0.0
		for _, x := range l.Groups[g] {
			want += float64(x + 1)
		}
		after := want
		if r == 173 && n > 173 {
			after--
		}
		l.AllReduce = append(l.AllReduce, results.BeforeAfter{WorldRank: r, Before: float64(r + 1), After: after, Want: want})
	}
	ar := results.CollectiveVerify{Collective: "allreduce", Pass: n <= 173}
	if n > 173 {
		ar.SimpleWrong = 1
		for i := 0; i < 14; i++ {
			ar.Mismatches = append(ar.Mismatches, results.Mismatch{Rank: 173, Index: int64(i), Want: "1388", Got: "1387"})
		}
	}
	l.Collectives = []results.CollectiveVerify{ar, {Collective: "allgather", Pass: true}}
	return &results.GroupVerification{Tool: results.Tool{Name: "collbench", Version: "1.2.3"}, Backend: results.Backend{Name: "cpu", Version: "go1.26.8"},
		Ranks: n, Layouts: []results.LayoutVerify{l}, OK: n <= 173}
}

// TestGroupVerificationAtScale renders verify-groups of 8 ranks (a row per
// rank) and of 8,192 (a line per layout, a row per wrong rank).
func TestGroupVerificationAtScale(t *testing.T) {
	for _, c := range []struct {
		n    int
		name string
	}{{8, "verify-groups-8.golden"}, {8192, "verify-groups-8192.golden"}} {
		var b bytes.Buffer
		if err := WriteGroupVerification(&b, verifyAtScale(c.n, 8)); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, c.name, b.Bytes())
		if lines := strings.Count(b.String(), "\n"); lines > 40 {
			t.Errorf("%d ranks: %d lines", c.n, lines)
		}
	}
}

// TestWorldAtScale renders `collbench world` of 8 processes (a row each)
// and of 8,192 on 1,024 hosts, one of them short of a process and one
// with its local ranks out of order.
func TestWorldAtScale(t *testing.T) {
	for _, c := range []struct {
		n    int
		name string
	}{{8, "world-8.golden"}, {8192, "world-8192.golden"}} {
		var ms []WorldMember
		for r := 0; r < c.n; r++ {
			m := WorldMember{Rank: r, Host: fmt.Sprintf("node-%04d", r/8), LocalRank: r % 8, PID: 1000 + r}
			if c.n > 8 && r/8 == 500 {
				m.LocalRank = 7 - r%8
			}
			if c.n > 8 && r == 8191 {
				m.Host = "node-1024"
			}
			ms = append(ms, m)
		}
		var b bytes.Buffer
		if err := WriteWorld(&b, ms); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, c.name, b.Bytes())
		if lines := strings.Count(b.String(), "\n"); lines > 20 {
			t.Errorf("%d processes: %d lines", c.n, lines)
		}
	}
}

// TestHostTopologiesAtScale renders topo's roll-up of one host of 8
// processes and of 1,024 hosts, two of them built differently.
func TestHostTopologiesAtScale(t *testing.T) {
	for _, c := range []struct {
		hosts int
		name  string
	}{{1, "topo-hosts-8.golden"}, {1024, "topo-hosts-8192.golden"}} {
		var hs []HostTopology
		for h := 0; h < c.hosts; h++ {
			x := HostTopology{Host: fmt.Sprintf("node-%04d", h), Fingerprint: "5e1f09a2c4d7",
				Summary: "8x NVIDIA H200; NV18 between all pairs; NICs mlx5_0-mlx5_7 400 Gb/s, one per GPU"}
			for k := 0; k < 8; k++ {
				x.Ranks = append(x.Ranks, h*8+k)
			}
			switch h {
			case 500:
				x.Fingerprint, x.Summary = "77b0e1c3a9f2", "8x NVIDIA H200; NV18 between all pairs but GPU 3 (NV12); NICs mlx5_0-mlx5_7 400 Gb/s, one per GPU"
			case 900:
				x.Fingerprint, x.Summary = "0c4d2e8b1a66", "8x NVIDIA H200; NV18 between all pairs; NICs mlx5_0-mlx5_6 400 Gb/s (7 for 8 GPUs)"
			}
			hs = append(hs, x)
		}
		var b bytes.Buffer
		if err := WriteHostTopologies(&b, hs); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, c.name, b.Bytes())
		if c.hosts > 1 && (!strings.Contains(b.String(), "3 shapes of host") || !strings.Contains(b.String(), "node-0500")) {
			t.Errorf("the odd hosts are not named:\n%s", b.String())
		}
	}
}

// TestComparisonAtScale compares two grouped sweeps of 8 and 8,192 ranks,
// the second slower at 64 MiB: the case names write the groups as ranges
// ("1,024 groups of 8: [[0-7],…]"), not the rank list as given.
func TestComparisonAtScale(t *testing.T) {
	for _, c := range []struct {
		n, per int
		name   string
	}{{8, 2, "compare-8.golden"}, {8192, 8, "compare-8192.golden"}} {
		base, cur := groupedAtScale(c.n, c.per), groupedAtScale(c.n, c.per)
		for i := range cur.Results {
			if cur.Results[i].SizeBytes == 64<<20 {
				h := cur.Results[i].OutOfPlace
				h.TimeUS *= 1.3
				h.AlgBW /= 1.3
				h.BusBW /= 1.3
			}
		}
		cmp, err := Compare(base, cur, "base.json", "new.json", DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, format := range []string{"table", "markdown"} {
			if err := WriteComparison(&b, cmp, format); err != nil {
				t.Fatal(err)
			}
		}
		golden.Check(t, c.name, b.Bytes())
		for _, line := range strings.Split(b.String(), "\n") {
			if len(line) > 200 {
				t.Errorf("%d ranks: a line of %d characters: %.120s…", c.n, len(line), line)
			}
		}
	}
}
