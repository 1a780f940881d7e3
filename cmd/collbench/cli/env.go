package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/measure"
	"collbench/report"
	"collbench/results"
)

// EnvOptions are the flags of `collbench env`.
type EnvOptions struct {
	IO      *IOStreams
	Factory *Factory
	Backend string
	NCCLLib string
	Format  string
}

// EnvReport is what `collbench env` finds.
type EnvReport struct {
	Selected     string              `json:"selected"`
	Reason       string              `json:"reason"`
	DefaultRanks int                 `json:"default_ranks"`
	NCCL         *results.Backend    `json:"nccl,omitempty"`
	NCCLError    string              `json:"nccl_error,omitempty"`
	Environment  results.Environment `json:"environment"`
	CPUs         int                 `json:"cpus"`
	// MPI is the MPI library this build runs with (bin/collbench-mpi);
	// MPIError says why there is none.
	MPI      string `json:"mpi,omitempty"`
	MPIError string `json:"mpi_error,omitempty"`
	// Support is what each backend runs, per buffer, collective and dtype.
	Support []measure.SupportMatrix `json:"support"`
}

// NewCmdEnv builds `collbench env`.
func NewCmdEnv(f *Factory, runF func(*EnvOptions) error) *cobra.Command {
	o := &EnvOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Show which backend would be used and why, with library and driver versions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return envRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Backend, "backend", "auto", "auto, cpu, nccl or mpi (bin/collbench-mpi under mpirun)")
	cmd.Flags().StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load")
	cmd.Flags().StringVar(&o.Format, "format", "table", "table or json")
	return cmd
}

// envRun prints the backends, libraries and what each supports (cpu,
// nccl, mpi by collective, type and buffer).
func envRun(o *EnvOptions) error {
	format, err := report.ParseFormat(o.Format)
	if err != nil || format == report.FormatCSV {
		return engine.UsageErrorf("unknown --format %q for env (valid: table, json)", o.Format)
	}
	f := o.Factory
	choice, err := f.ChooseBackend(o.Backend, o.NCCLLib)
	if err != nil {
		return err
	}
	rep := EnvReport{
		Selected:     choice.Backend.Name(),
		Reason:       choice.Reason,
		DefaultRanks: choice.Backend.DefaultRanks(),
		Environment:  f.EnvironmentOf(choice.Backend, choice.Reason, true),
		CPUs:         runtime.NumCPU(),
	}
	if nb, err := f.OpenNCCL(o.NCCLLib); err != nil {
		rep.NCCLError = err.Error()
	} else {
		info := nb.Info()
		rep.NCCL = &info
	}
	if lib, err := engine.DescribeMPI(); err != nil {
		rep.MPIError = err.Error()
	} else {
		rep.MPI = lib
	}
	rep.Support = f.SupportMatrices(o.NCCLLib)
	if format == report.FormatJSON {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	w := o.IO.Out
	fmt.Fprintf(w, "collbench %s\n", Version)
	fmt.Fprintf(w, "backend:       %s (%s)\n", rep.Selected, rep.Reason)
	fmt.Fprintf(w, "default ranks: %d\n", rep.DefaultRanks)
	if rep.NCCL != nil {
		n := rep.NCCL
		fmt.Fprintf(w, "nccl:          %s from %s\n", n.Version, n.Library)
		if n.Driver != "" {
			fmt.Fprintf(w, "driver:        %s\n", n.Driver)
		}
		for _, d := range n.Devices {
			fmt.Fprintf(w, "  gpu %d:       %s %s\n", d.Rank, d.Name, d.BusID)
		}
	} else {
		fmt.Fprintf(w, "nccl:          unavailable: %s\n", rep.NCCLError)
	}
	if rep.MPI != "" {
		fmt.Fprintf(w, "mpi:           %s\n", rep.MPI)
	} else {
		fmt.Fprintf(w, "mpi:           unavailable: %s\n", rep.MPIError)
	}
	e := rep.Environment
	fmt.Fprintf(w, "host:          %s (%s/%s, %d CPUs, %s)\n", e.Host, e.OS, e.Arch, rep.CPUs, e.GoVersion)
	if len(e.Env) == 0 {
		fmt.Fprintln(w, "environment:   no NCCL_*, CUDA_*, UCX_* or COLLBENCH_* variables set")
	} else {
		var kv []string
		for k, v := range e.Env {
			kv = append(kv, k+"="+v)
		}
		fmt.Fprintf(w, "environment:   %s\n", strings.Join(sortedList(kv), " "))
	}
	fmt.Fprintln(w)
	return report.WriteSupport(w, rep.Support)
}

func sortedList(s []string) []string {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return slices.Sorted(maps.Keys(m))
}
