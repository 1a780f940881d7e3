package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"collbench/measure"
)

// TestEveryCommandsFlagsReachItsOptions parses a command line of each
// command through its runF, in the cli/cli way: every flag lands in the
// options struct its run function reads, and nothing runs.
func TestEveryCommandsFlagsReachItsOptions(t *testing.T) {
	f, _, _ := testFactory()
	type tc struct {
		name string
		cmd  func() (*cobra.Command, func() bool)
		args []string
	}
	cases := []tc{
		{"allreduce", func() (*cobra.Command, func() bool) {
			var o *BenchOptions
			c := NewCmdCollective(f, measure.AllReduce, func(x *BenchOptions) error { o = x; return nil })
			return c, func() bool { return o.Sizes == "1M" && o.Iters == 3 && o.Backend == "cpu" && o.Timeout == time.Minute }
		}, []string{"--sizes", "1M", "-n", "3", "--backend", "cpu", "--timeout", "1m"}},
		{"sweep", func() (*cobra.Command, func() bool) {
			var o *BenchOptions
			c := NewCmdSweep(f, func(x *BenchOptions) error { o = x; return nil })
			return c, func() bool {
				return slices.Equal(o.Collectives, []measure.Collective{measure.AllGather, measure.Broadcast}) && o.Cycles == 2
			}
		}, []string{"--collectives", "allgather,broadcast", "-N", "2"}},
		{"verify-groups", func() (*cobra.Command, func() bool) {
			var o *VerifyGroupsOptions
			c := NewCmdVerifyGroups(f, func(x *VerifyGroupsOptions) error { o = x; return nil })
			return c, func() bool { return slices.Equal(o.RankList, []string{"pairs", "halves"}) && o.Seed == 7 }
		}, []string{"--rank-list", "pairs", "--rank-list", "halves", "--seed", "7"}},
		{"doctor", func() (*cobra.Command, func() bool) {
			var o *DoctorOptions
			c := NewCmdDoctor(f, func(x *DoctorOptions) error { o = x; return nil })
			return c, func() bool { return o.Quick && o.Prom == "d.prom" && o.BWSize == "64M" }
		}, []string{"--quick", "--prom", "d.prom", "--bw-size", "64M"}},
		{"launch", func() (*cobra.Command, func() bool) {
			var o *LaunchOptions
			c := NewCmdLaunch(f, func(x *LaunchOptions) error { o = x; return nil })
			return c, func() bool {
				return o.Procs == 8 && o.Nodes == 2 && slices.Equal(o.Args, []string{"doctor", "--quick"})
			}
		}, []string{"-n", "8", "--nodes", "2", "--", "doctor", "--quick"}},
		{"env", func() (*cobra.Command, func() bool) {
			var o *EnvOptions
			c := NewCmdEnv(f, func(x *EnvOptions) error { o = x; return nil })
			return c, func() bool { return o.Format == "json" && o.Backend == "cpu" }
		}, []string{"--format", "json", "--backend", "cpu"}},
		{"world", func() (*cobra.Command, func() bool) {
			var o *WorldOptions
			c := NewCmdWorld(f, func(x *WorldOptions) error { o = x; return nil })
			return c, func() bool { return o.BootstrapTimeout == 30*time.Second }
		}, []string{"--bootstrap-timeout", "30s"}},
		{"topo", func() (*cobra.Command, func() bool) {
			var o *TopoOptions
			c := NewCmdTopo(f, func(x *TopoOptions) error { o = x; return nil })
			return c, func() bool { return o.NoNCCL && o.Record == "facts.json" && o.Format == "json" }
		}, []string{"--no-nccl", "--record", "facts.json", "--format", "json"}},
		{"compare", func() (*cobra.Command, func() bool) {
			var o *CompareOptions
			c := NewCmdCompare(f, func(x *CompareOptions) error { o = x; return nil })
			return c, func() bool {
				return o.BasePath == "a.json" && o.CurPath == "b.json" && o.BusBWPct == 3 && o.Format == "junit"
			}
		}, []string{"a.json", "b.json", "--busbw-threshold", "3", "--format", "junit"}},
		{"baseline make", func() (*cobra.Command, func() bool) {
			var o *BaselineOptions
			c := NewCmdBaseline(f, func(x *BaselineOptions) error { o = x; return nil })
			c.SetArgs([]string{"make", "r1.json", "r2.json", "-o", "base.json"})
			return c, func() bool { return slices.Equal(o.Runs, []string{"r1.json", "r2.json"}) && o.Output == "base.json" }
		}, nil},
		{"report", func() (*cobra.Command, func() bool) {
			var o *ReportOptions
			c := NewCmdReport(f, func(x *ReportOptions) error { o = x; return nil })
			return c, func() bool { return o.Output == "r.html" && o.Baseline == "b.json" && o.Title == "nightly" }
		}, []string{"run.json", "-o", "r.html", "--baseline", "b.json", "--title", "nightly"}},
		{"plot", func() (*cobra.Command, func() bool) {
			var o *PlotOptions
			c := NewCmdPlot(f, func(x *PlotOptions) error { o = x; return nil })
			return c, func() bool { return o.Kind == "time" && o.Collective == "allgather" && o.Output == "p.svg" }
		}, []string{"run.json", "--kind", "time", "--collective", "allgather", "-o", "p.svg"}},
		{"run", func() (*cobra.Command, func() bool) {
			var o *RunOptions
			c := NewCmdRun(f, func(x *RunOptions) error { o = x; return nil })
			return c, func() bool { return o.Config == "ci.yaml" && o.NoBaseline && o.Output == "out" }
		}, []string{"--config", "ci.yaml", "--no-baseline", "--output", "out"}},
		{"stream", func() (*cobra.Command, func() bool) {
			var o *StreamOptions
			c := NewCmdStream(f, func(x *StreamOptions) error { o = x; return nil })
			return c, func() bool { return o.Listen == "127.0.0.1:0" && o.Duration == time.Second }
		}, []string{"--listen", "127.0.0.1:0", "--duration", "1s"}},
		{"man", func() (*cobra.Command, func() bool) {
			var o *ManOptions
			c := NewCmdMan(f, func(x *ManOptions) error { o = x; return nil })
			return c, func() bool { return o.Dir == "pages" && o.Root != nil }
		}, []string{"--dir", "pages"}},
		{"version", func() (*cobra.Command, func() bool) {
			var o *VersionOptions
			c := NewCmdVersion(f, func(x *VersionOptions) error { o = x; return nil })
			return c, func() bool { return o != nil && o.IO == f.IO }
		}, []string{}},
	}
	for _, c := range cases {
		cmd, ok := c.cmd()
		if c.args != nil {
			cmd.SetArgs(c.args)
		}
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		if err := cmd.Execute(); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !ok() {
			t.Errorf("%s %q: the flags did not reach the options", c.name, c.args)
		}
	}
}
