package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"collbench/internal/bounded"
	"collbench/internal/tempdir"
	"collbench/topology"
)

// TopoRequest is what collbench topo reads: GPU facts from a file recorded
// earlier (else NVML), sysfs under SysfsRoot, and NCCL's view from its
// captured log and topology dump, or from a short NCCL run (unless NoNCCL).
type TopoRequest struct {
	FactsFile, SysfsRoot, NCCLLog, NCCLXML, NCCLLib string
	NoNCCL                                          bool
}

// TopoRead is the machine as topo read it, with the GPU facts NVML gave
// (for --record) or why it gave none.
type TopoRead struct {
	Topology   *topology.Topology
	Facts      *topology.Facts
	FactsError string
}

// ReadTopology reads what r asks for and builds the topology; what could
// not be read is in its Unavailable lines. A facts file or NCCL file that
// cannot be read is a usage error.
func (f *System) ReadTopology(ctx context.Context, r TopoRequest) (*TopoRead, error) {
	in := topology.Inputs{Host: f.HostIdentity(), Env: topoEnv(f)}
	out := &TopoRead{}
	if r.FactsFile != "" {
		b, err := bounded.ReadFile(ctx, r.FactsFile, bounded.Results)
		if err != nil {
			return nil, UsageErrorf("cannot read --facts %s: %w", r.FactsFile, err)
		}
		facts, err := topology.DecodeFacts(b)
		if err != nil {
			return nil, UsageErrorf("--facts %s is not a file of GPU facts written by topo --record: %v", r.FactsFile, err)
		}
		in.Facts = facts
	} else {
		facts, err := f.NVMLFacts()
		if err != nil {
			in.Errors = append(in.Errors, err.Error())
		} else {
			in.Facts = &facts
		}
	}
	out.Facts = in.Facts
	if in.Facts == nil {
		out.FactsError = strings.Join(in.Errors, "; ")
	}
	if st, err := os.Stat(filepath.Join(r.SysfsRoot, "sys", "class")); err == nil && st.IsDir() {
		in.Sysfs = &topology.Sysfs{Root: r.SysfsRoot}
	} else {
		in.Errors = append(in.Errors, fmt.Sprintf("sysfs: %s is not readable, so no NICs or PCI paths", filepath.Join(r.SysfsRoot, "sys", "class")))
	}
	switch {
	case r.NCCLLog != "" || r.NCCLXML != "":
		v, err := parseNCCLFiles(ctx, r.NCCLLog, r.NCCLXML)
		var ue *UsageError
		switch {
		case errors.As(err, &ue):
			return nil, err
		case err != nil:
			return nil, &UsageError{Err: err}
		}
		in.NCCL = v
	case r.NoNCCL:
		in.Errors = append(in.Errors, "NCCL's view: skipped (--no-nccl)")
	case in.Facts == nil || len(in.Facts.GPUs) == 0:
		in.Errors = append(in.Errors, "NCCL's view: no GPU to run NCCL on")
	default:
		v, err := probeNCCL(ctx, r.NCCLLib, len(in.Facts.GPUs))
		if err != nil {
			in.Errors = append(in.Errors, "NCCL's view: "+err.Error())
		} else {
			in.NCCL = v
		}
	}
	out.Topology = topology.Build(in)
	return out, nil
}

func topoEnv(f *System) map[string]string {
	env := map[string]string{}
	for _, kv := range f.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if ok && (RelevantEnv(k) || k == "CUDA_VISIBLE_DEVICES") {
			env[k] = v
		}
	}
	return env
}

func parseNCCLFiles(ctx context.Context, logPath, xmlPath string) (*topology.NCCLView, error) {
	v := &topology.NCCLView{}
	if logPath != "" {
		fh, release, err := bounded.Open(ctx, logPath)
		if err != nil {
			return nil, fmt.Errorf("cannot read the NCCL log: %w", err)
		}
		defer release()
		if v, err = topology.ParseLog(fh); err != nil {
			if errors.Is(err, topology.ErrNotNCCLLog) {
				return nil, UsageErrorf("--nccl-log %s is not an NCCL log: %v", logPath, err)
			}
			return nil, fmt.Errorf("reading the NCCL log: %v", err)
		}
	}
	if xmlPath != "" {
		fh, release, err := bounded.Open(ctx, xmlPath)
		if err != nil {
			return nil, fmt.Errorf("cannot read the NCCL topology dump: %w", err)
		}
		defer release()
		if err := v.ParseTopoXML(fh); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// probeNCCL runs a short allreduce on every GPU in a child collbench with
// NCCL's INFO log and topology dump sent to files, then parses them.
func probeNCCL(ctx context.Context, lib string, gpus int) (*topology.NCCLView, error) {
	dir, release, err := tempdir.Make("collbench-topo-")
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
	// An exit at once (a second signal) ends the child before the
	// directory of its logs goes.
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("the NCCL probe did not start: %v", err)
	}
	ended := make(chan struct{})
	var werr error
	go func() {
		werr = cmd.Wait()
		close(ended)
	}()
	defer tempdir.EndOnExit(func() { _ = cmd.Process.Kill() }, ended)()
	<-ended
	if werr != nil {
		return nil, fmt.Errorf("the NCCL probe failed: %v: %s", werr, strings.TrimSpace(lastLine(out.String())))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "nccl.*.log"))
	if len(logs) == 0 {
		return nil, fmt.Errorf("the NCCL probe wrote no log")
	}
	xmlPath := filepath.Join(dir, "topo.xml")
	if _, err := os.Stat(xmlPath); err != nil {
		xmlPath = ""
	}
	v, err := parseNCCLFiles(ctx, logs[0], xmlPath)
	var ue *UsageError
	if errors.As(err, &ue) {
		return nil, fmt.Errorf("the NCCL probe's log holds no line NCCL wrote: %s", strings.TrimSpace(lastLine(out.String())))
	}
	return v, err
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
