package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/measure"
	"collbench/report"
)

// VerifyGroupsOptions are the flags of `collbench verify-groups`.
type VerifyGroupsOptions struct {
	IO       *IOStreams
	Factory  *Factory
	Ctx      context.Context
	Ranks    int
	RankList []string
	Sizes    string
	Format   string
	Backend  string
	NCCLLib  string
	Seed     uint64

	engine.RunFlags
}

// NewCmdVerifyGroups builds `collbench verify-groups`.
func NewCmdVerifyGroups(f *Factory, runF func(*VerifyGroupsOptions) error) *cobra.Command {
	o := &VerifyGroupsOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "verify-groups",
		Short: "Check that every collective works inside groups of ranks (rank lists)",
		Long: `verify-groups runs every collective inside each group of a set of layouts and
checks every value: first with rank r contributing r+1, then with random exact
patterns in both modes. It prints each rank's allreduce before and after, its
communicator attributes, and a PASS/FAIL matrix. Exit 0 only if every value matched.

Default layouts: all ranks, pairs, halves, uneven ([[0..n-2],[n-1]]), reversed
([[1..n-1],[0]]), interleaved (stride:2), singletons, and node and cross-node when
the ranks span several hosts. --rank-list (repeatable) replaces them.

` + measure.PresetHelp,
		Args:    noArgs,
		Example: "  collbench verify-groups -g 4\n  collbench verify-groups --rank-list '[[0,1],[2,3]]' --rank-list mod:2",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return verifyGroupsRun(o)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.StringArrayVar(&o.RankList, "rank-list", nil, "a layout to check (repeatable); default: the layouts listed above")
	fs.StringVar(&o.Sizes, "sizes", "1K,1M", "sizes of the random-pattern check")
	fs.StringVar(&o.Format, "format", "table", "table or json")
	fs.StringVar(&o.Backend, "backend", "auto", "auto, cpu, nccl or mpi (bin/collbench-mpi under mpirun)")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the random patterns")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks")
	return cmd
}

func verifyGroupsRun(o *VerifyGroupsOptions) error {
	if o.Format != "table" && o.Format != "json" {
		return engine.UsageErrorf("unknown --format %q for verify-groups (valid: table, json)", o.Format)
	}
	sizes, err := measure.ParseSizes(o.Sizes)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if o.Ranks < 0 {
		return engine.UsageErrorf("invalid --ranks %d: must be at least 1", o.Ranks)
	}
	v := engine.VerifyGroups{Backend: o.Backend, NCCLLib: o.NCCLLib, Ranks: o.Ranks, RankLists: o.RankList,
		Sizes: sizes, Seed: o.Seed, RunFlags: o.RunFlags, Tool: Version}
	v.OnReady = func(choice engine.BackendChoice, rank0 bool) error {
		if choice.Auto && rank0 {
			fmt.Fprintf(o.IO.ErrOut, "collbench: backend %s (%s)\n", choice.Backend.Name(), choice.Reason)
		}
		return nil
	}
	res, runErr := o.Factory.RunVerifyGroups(o.Ctx, v)
	if res == nil {
		return runErr
	}
	if o.Format == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = report.WriteGroupVerification(o.IO.Out, res)
	}
	if err != nil {
		return &engine.RunError{Err: err}
	}
	return runErr
}
