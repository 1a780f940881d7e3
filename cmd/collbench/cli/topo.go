package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"collbench/engine"
	"collbench/internal/jsonwords"
	"collbench/internal/outfile"
	"collbench/report"
	"collbench/topology"
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

func topoRun(o *TopoOptions) error {
	if o.Format != "table" && o.Format != "json" {
		return engine.UsageErrorf("unknown --format %q for topo (valid: table, json)", o.Format)
	}
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	f := o.Factory
	var record *outfile.Target
	if o.Record != "" {
		var err error
		if record, err = outputTarget("--record", o.Record); err != nil {
			return err
		}
	}
	in := topology.Inputs{Host: f.HostIdentity(), Env: topoEnv(f)}
	if o.Facts != "" {
		b, err := os.ReadFile(o.Facts)
		if err != nil {
			return engine.UsageErrorf("cannot read --facts %s: %v", o.Facts, errors.Unwrap(err))
		}
		var facts topology.Facts
		if err := jsonwords.Decode(b, &facts); err != nil {
			return engine.UsageErrorf("--facts %s is not a file of GPU facts written by topo --record: %v", o.Facts, err)
		}
		in.Facts = &facts
	} else {
		facts, err := f.NVMLFacts()
		if err != nil {
			in.Errors = append(in.Errors, err.Error())
		} else {
			in.Facts = &facts
		}
	}
	var recordErr error
	if o.Record != "" && in.Facts != nil {
		b, _ := json.MarshalIndent(in.Facts, "", "  ")
		if err := writeTarget(o.IO.Out, record, true, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
			return err
		}
	} else if o.Record != "" {
		// Said after the topology is shown: the rest of it is still worth reading.
		recordErr = &engine.RunError{Err: fmt.Errorf("--record %s: nothing written, NVML reported no GPU facts (%s)", o.Record, strings.Join(in.Errors, "; "))}
	}
	if st, err := os.Stat(filepath.Join(o.SysfsRoot, "sys", "class")); err == nil && st.IsDir() {
		in.Sysfs = &topology.Sysfs{Root: o.SysfsRoot}
	} else {
		in.Errors = append(in.Errors, fmt.Sprintf("sysfs: %s is not readable, so no NICs or PCI paths", filepath.Join(o.SysfsRoot, "sys", "class")))
	}
	switch {
	case o.NCCLLog != "" || o.NCCLXML != "":
		v, err := parseNCCLFiles(o.NCCLLog, o.NCCLXML)
		if err != nil {
			return engine.UsageErrorf("%v", err)
		}
		in.NCCL = v
	case o.NoNCCL:
		in.Errors = append(in.Errors, "NCCL's view: skipped (--no-nccl)")
	case in.Facts == nil || len(in.Facts.GPUs) == 0:
		in.Errors = append(in.Errors, "NCCL's view: no GPU to run NCCL on")
	default:
		v, err := probeNCCL(ctx, o.NCCLLib, len(in.Facts.GPUs))
		if err != nil {
			in.Errors = append(in.Errors, "NCCL's view: "+err.Error())
		} else {
			in.NCCL = v
		}
	}
	t := topology.Build(in)
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
			v = topoWorld{Topology: t, Hosts: hosts}
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

// topoWorld is topo's JSON under a launcher: rank 0's topology and every
// host's shape.
type topoWorld struct {
	Topology *topology.Topology    `json:"topology"`
	Hosts    []report.HostTopology `json:"hosts"`
}

func topoEnv(f *Factory) map[string]string {
	env := map[string]string{}
	for _, kv := range f.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if ok && (engine.RelevantEnv(k) || k == "CUDA_VISIBLE_DEVICES") {
			env[k] = v
		}
	}
	return env
}

func parseNCCLFiles(logPath, xmlPath string) (*topology.NCCLView, error) {
	v := &topology.NCCLView{}
	if logPath != "" {
		fh, err := os.Open(logPath)
		if err != nil {
			return nil, fmt.Errorf("cannot read the NCCL log: %v", err)
		}
		defer fh.Close()
		if v, err = topology.ParseLog(fh); err != nil {
			return nil, fmt.Errorf("reading the NCCL log: %v", err)
		}
	}
	if xmlPath != "" {
		fh, err := os.Open(xmlPath)
		if err != nil {
			return nil, fmt.Errorf("cannot read the NCCL topology dump: %v", err)
		}
		defer fh.Close()
		if err := v.ParseTopoXML(fh); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// probeNCCL runs a short allreduce on every GPU in a child collbench with
// NCCL's INFO log and topology dump sent to files, then parses them.
func probeNCCL(ctx context.Context, lib string, gpus int) (*topology.NCCLView, error) {
	dir, release, err := tempDir("collbench-topo-")
	if err != nil {
		return nil, err
	}
	defer release()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	args := []string{"allreduce", "--backend", "nccl", "-g", fmt.Sprint(gpus), "--sizes", "1M", "-n", "1", "-w", "1", "--check", "0", "--format", "csv"}
	if lib != "" {
		args = append(args, "--nccl-lib", lib)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,GRAPH,NET,ENV",
		"NCCL_DEBUG_FILE="+filepath.Join(dir, "nccl.%p.log"), "NCCL_TOPO_DUMP_FILE="+filepath.Join(dir, "topo.xml"))
	if _, ok := os.LookupEnv("NCCL_NVLS_ENABLE"); !ok {
		cmd.Env = append(cmd.Env, "NCCL_NVLS_ENABLE=0")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("the NCCL probe failed: %v: %s", err, strings.TrimSpace(lastLine(string(out))))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "nccl.*.log"))
	if len(logs) == 0 {
		return nil, fmt.Errorf("the NCCL probe wrote no log")
	}
	xmlPath := filepath.Join(dir, "topo.xml")
	if _, err := os.Stat(xmlPath); err != nil {
		xmlPath = ""
	}
	return parseNCCLFiles(logs[0], xmlPath)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
