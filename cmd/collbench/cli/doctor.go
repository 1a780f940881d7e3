package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"collbench/doctor"
	"collbench/engine"
	"collbench/measure"
	"collbench/results"
)

// DoctorOptions are the flags of `collbench doctor`.
type DoctorOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	Quick   bool
	Format  string
	Output  string
	Prom    string
	HTML    string
	Config  string
	Backend string
	NCCLLib string
	Ranks   int
	Quiet   bool
	// Evidence is how much evidence the text report writes: auto, summary
	// or all.
	Evidence string

	BWSize, LatSize, CopySize, WorldSize string
	Iters                                int
	// Simulate is a cluster file to run the search on instead of GPUs.
	Simulate string
	// History is a directory that keeps each node's figures run after run.
	History string

	engine.RunFlags
}

// NewCmdDoctor builds `collbench doctor`.
func NewCmdDoctor(f *Factory, runF func(*DoctorOptions) error) *cobra.Command {
	o := &DoctorOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Find the bad GPU, link, NIC or host and name it",
		Long: `doctor runs the search cluster engineers do by hand, on the ranks it has (one
process with every local GPU, or one process per GPU under any launcher), with
no relaunch:

  1. health facts, no traffic: PCIe links below their maximum, NVLinks down or
     with errors, ECC and memory repair, clock slowdowns, hosts whose GPU count,
     driver or NCCL differ, InfiniBand/RoCE ports down or slow, GPUs far from a NIC
  2. each GPU alone, all at once: a device-to-device copy and a compute probe
  3. every GPU pair of a host, in rounds of disjoint pairs: one way and both ways
  4. across hosts: host pairs, per rail and whole-host allreduce; suspects are
     paired again with healthy hosts (a constant number of rounds)
  5. the whole world: allreduce against the expectation, bisected when it falls
     short and nothing above explains it
  6. every value of every stage checked: wrong data names the rank that sent it

A figure is a finding when it is far below its peers of the same link class or
below a fraction of what the topology promises; suspects are measured again
before they are named. The verdict comes first, then the evidence.

Exit 0: healthy. 1: findings. 2: bad input. 3: the run failed. 4: a rank hung.`,
		Args:    noArgs,
		Example: "  collbench doctor --quick\n  collbench doctor --prom /var/lib/node_exporter/collbench.prom\n  srun -N 4 --ntasks-per-node 8 collbench doctor -o doctor.json",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if o.Simulate != "" {
				// The cluster file is the machine: a flag that picks this
				// host's GPUs or libraries would be ignored without a word.
				for _, fl := range []string{"ranks", "backend", "nccl-lib", "device"} {
					if cmd.Flags().Changed(fl) {
						return engine.UsageErrorf("--%s with --simulate: the cluster file sets the modelled hosts and GPUs (hosts, gpus_per_host; docs/simulate.md); leave --%s out", fl, fl)
					}
				}
			}
			if runF != nil {
				return runF(o)
			}
			return doctorRun(o)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.Quick, "quick", false, "health facts and one round of each stage (node admission)")
	fs.StringVar(&o.Format, "format", "table", "stdout: table or json")
	fs.StringVarP(&o.Output, "output", "o", "", "also write the report as JSON to FILE")
	fs.StringVar(&o.Prom, "prom", "", "also write the verdict and figures for node-exporter's textfile collector to FILE")
	fs.StringVar(&o.HTML, "html", "", "also write an HTML report with a heat map of the pairs to FILE")
	fs.StringVar(&o.Config, "config", "", "a YAML file whose doctor: section sets thresholds by hardware class")
	fs.StringVar(&o.Backend, "backend", "auto", "auto, cpu, nccl or mpi (bin/collbench-mpi under mpirun)")
	fs.StringVar(&o.NCCLLib, "nccl-lib", "", "path of libnccl.so to load")
	fs.IntVarP(&o.Ranks, "ranks", "g", 0, "ranks in this process (default: every GPU, or 4 on the cpu backend)")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no stage progress on stderr")
	fs.StringVar(&o.Evidence, "evidence", "auto", "the text report's evidence: all (every GPU, pair and round), summary (distributions, the slowest first, a row per stage), or auto (all up to 16 ranks, summary above)")
	fs.StringVar(&o.BWSize, "bw-size", "", "message size of the bandwidth tests (default 256M on GPUs, 1M on the cpu backend)")
	fs.StringVar(&o.LatSize, "latency-size", "4K", "message size of the latency test")
	fs.StringVar(&o.CopySize, "copy-size", "", "bytes each GPU copies alone (default 256M on GPUs, 4M on the cpu backend)")
	fs.StringVar(&o.WorldSize, "world-size", "", "message size of the whole-world allreduce (default 1G on GPUs, 4M on the cpu backend)")
	fs.IntVarP(&o.Iters, "iters", "n", 0, "timed iterations per test; the best one counts (default 10 on GPUs, 15 on the cpu backend)")
	fs.StringVar(&o.History, "history", "", "keep each node's figures in DIR, under its host and topology fingerprint, and judge today's against its own past runs")
	fs.StringVar(&o.Simulate, "simulate", "", "run the search on the cluster model in FILE (docs/simulate.md): its plan, rounds, modelled time and verdict on the planted faults")
	addRunFlags(fs, &o.RunFlags)
	atLeast(fs, "1", "ranks", "iters")
	return cmd
}

// maxDoctorIters bounds doctor's --iters: far above what settles a figure,
// far below a run that would take days.
const maxDoctorIters = 1000

// sizeFlag parses a size flag, or returns def when it is empty.
func sizeFlag(name, v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	s, err := measure.ParseSize(v)
	if err != nil {
		return 0, engine.UsageErrorf("invalid --%s: %v", name, err)
	}
	return s, nil
}

// doctorRun runs doctor (on this machine, a launcher's world or a
// cluster model) and writes its verdict: text or JSON, -o, --html,
// --prom and the node's history.
func doctorRun(o *DoctorOptions) error {
	if o.Format != "table" && o.Format != "json" {
		return engine.UsageErrorf("unknown --format %q for doctor (valid: table, json)", o.Format)
	}
	evidence, err := doctor.ParseEvidence(o.Evidence)
	if err != nil {
		return &engine.UsageError{Err: err}
	}
	if o.Iters < 0 {
		return engine.UsageErrorf("invalid --iters %d: must be at least 1", o.Iters)
	}
	if o.Iters > maxDoctorIters {
		return engine.UsageErrorf("invalid --iters %d: doctor takes the best of at most %d iterations per test (each test's time grows with it, and a figure settles within tens); to watch a node over time, run doctor again with --history DIR", o.Iters, maxDoctorIters)
	}
	d := engine.Doctor{Backend: o.Backend, NCCLLib: o.NCCLLib, Ranks: o.Ranks, Knobs: doctor.Knobs{Quick: o.Quick, Iters: o.Iters}, RunFlags: o.RunFlags,
		Cluster: o.Simulate, History: o.History, Tool: Version,
		OnHistory: func(paths []string) {
			for _, p := range paths {
				sayWrote(o.IO.ErrOut, "the node's history record", p)
			}
		}}
	for _, sz := range []struct {
		flag, v string
		into    *int64
	}{{"bw-size", o.BWSize, &d.BWSize}, {"latency-size", o.LatSize, &d.LatSize}, {"copy-size", o.CopySize, &d.CopySize}, {"world-size", o.WorldSize, &d.WorldSize}} {
		var err error
		if *sz.into, err = sizeFlag(sz.flag, sz.v, 0); err != nil {
			return err
		}
	}
	if o.Config != "" {
		if _, err := d.LoadConfig(o.Ctx, o.Config); err != nil {
			return err
		}
	}
	targets := map[string]*results.Output{}
	for _, out := range []struct{ flag, path string }{{"--output", o.Output}, {"--prom", o.Prom}, {"--html", o.HTML}} {
		if out.path != "" {
			t, err := outputTarget(out.flag, out.path)
			if err != nil {
				return err
			}
			targets[out.flag] = t
		}
	}
	d.OnReady = func(choice engine.BackendChoice, rank0 bool) error {
		if choice.Auto && rank0 && !o.Quiet {
			fmt.Fprintf(o.IO.ErrOut, "collbench: backend %s (%s)\n", choice.Backend.Name(), choice.Reason)
		}
		return nil
	}
	if !o.Quiet {
		d.Progress = func(s string) { fmt.Fprintf(o.IO.ErrOut, "collbench doctor: %s\n", s) }
	}
	// The verdict where it was asked for: the files and the report on
	// stdout (the engine keeps the node's history first). A run on the
	// world delivers it before its session closes: after a fault, ending
	// MPI waits on the processes that failed, and the launcher may kill
	// this one first.
	deliver := func(rep *doctor.Report, _ error) error {
		for _, w := range []struct {
			flag  string
			write func(io.Writer) error
		}{{"--output", rep.WriteJSON}, {"--prom", func(w io.Writer) error { return doctor.WriteProm(rep, w) }}, {"--html", func(w io.Writer) error { return doctor.WriteHTML(rep, w) }}} {
			if t := targets[w.flag]; t != nil {
				if err := writeTarget(o.IO.Out, t, true, w.write); err != nil {
					return err
				}
			}
		}
		var err error
		if o.Format == "json" {
			err = rep.WriteJSON(o.IO.Out)
		} else {
			err = doctor.WriteTextWith(rep, o.IO.Out, evidence)
		}
		if err != nil {
			return &engine.RunError{Err: err}
		}
		return nil
	}
	d.OnReport = deliver
	_, runErr := o.Factory.RunDoctor(o.Ctx, d)
	return runErr
}
