package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/report"
	"collbench/results"
)

// TopoOptions are the flags of `collbench topo`.
type TopoOptions struct {
	IO        *IOStreams
	Factory   *Factory
	Ctx       context.Context
	Format    string
	SysfsRoot string
	NoNCCL    bool
	NCCLLog   string
	NCCLXML   string
	Facts     string
	Record    string
	NCCLLib   string
}

// NewCmdTopo builds `collbench topo`.
func NewCmdTopo(f *Factory, runF func(*TopoOptions) error) *cobra.Command {
	o := &TopoOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "Show the machine: GPUs, the NVLink/PCIe matrix, NICs, and what NCCL chose",
		Long: `topo reads the GPUs and the links between them through NVML, the NICs and PCI
locality through sysfs, and NCCL's own view from a short NCCL run (its INFO log
and topology dump, captured to files, never mixed into this output). It prints
what it could read and says plainly what was unavailable and why.`,
		Args:    noArgs,
		Example: "  collbench topo\n  collbench topo --format json > topo.json\n  collbench topo --nccl-log nccl.log --nccl-xml topo.xml",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return topoRun(o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Format, "format", "table", "table or json")
	fs.StringVar(&o.SysfsRoot, "sysfs", "/", "root of the sysfs tree to read NICs and PCI paths from")
	fs.BoolVar(&o.NoNCCL, "no-nccl", false, "skip the NCCL probe")
	fs.StringVar(&o.NCCLLog, "nccl-log", "", "parse this captured NCCL INFO log instead of running the probe")
	fs.StringVar(&o.NCCLXML, "nccl-xml", "", "parse this NCCL topology dump (NCCL_TOPO_DUMP_FILE)")
	fs.StringVar(&o.Facts, "facts", "", "analyse GPU facts recorded with --record instead of asking NVML")
	fs.StringVar(&o.Record, "record", "", "also write the raw GPU facts NVML reported to this file")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so for the probe")
	return cmd
}

// topoRun reads the machine (engine.ReadTopology), under a launcher
// gathers every host's shape on rank 0, and prints it as a table or JSON.
func topoRun(o *TopoOptions) error {
	if o.Format != "table" && o.Format != "json" {
		return engine.UsageErrorf("unknown --format %q for topo (valid: table, json)", o.Format)
	}
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	f := o.Factory
	var record *results.Output
	if o.Record != "" {
		var err error
		if record, err = outputTarget("--record", o.Record); err != nil {
			return err
		}
	}
	tr, err := f.ReadTopology(ctx, engine.TopoRequest{FactsFile: o.Facts, SysfsRoot: o.SysfsRoot, NCCLLog: o.NCCLLog, NCCLXML: o.NCCLXML, NCCLLib: o.NCCLLib, NoNCCL: o.NoNCCL})
	if err != nil {
		return err
	}
	t := tr.Topology
	var recordErr error
	if o.Record != "" && tr.Facts != nil {
		b, _ := json.MarshalIndent(tr.Facts, "", "  ")
		if err := writeTarget(o.IO.Out, record, true, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
			return err
		}
	} else if o.Record != "" {
		// Said after the topology is shown: the rest of it is still worth reading.
		recordErr = &engine.RunError{Err: fmt.Errorf("--record %s: nothing written, NVML reported no GPU facts (%s)", o.Record, tr.FactsError)}
	}
	if len(t.GPUs) == 0 && len(t.NICs) == 0 && t.NCCL == nil {
		return &engine.RunError{Err: fmt.Errorf("nothing could be read: %s", strings.Join(t.Unavailable, "; "))}
	}
	// Under a launcher the processes form a world: rank 0 writes its own
	// host's topology and every host's shape; the others write nothing.
	hosts, rank0, err := f.GatherTopologies(ctx, t)
	if err != nil {
		return err
	}
	if !rank0 {
		return recordErr
	}
	if o.Format == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		var v any = t
		if hosts != nil {
			v = report.TopologyWorld{Topology: t, Hosts: hosts}
		}
		if err := enc.Encode(v); err != nil {
			return &engine.RunError{Err: err}
		}
		return recordErr
	}
	if err := report.WriteTopology(o.IO.Out, t); err != nil {
		return &engine.RunError{Err: err}
	}
	if hosts != nil {
		if err := report.WriteHostTopologies(o.IO.Out, hosts); err != nil {
			return &engine.RunError{Err: err}
		}
	}
	return recordErr
}
