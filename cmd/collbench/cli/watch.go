package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"collbench/engine"
)

// watchFinalWrite bounds how long watch waits, at its end, for its last
// record to be written (a named pipe nobody reads would hold it forever).
var watchFinalWrite = 10 * time.Second

// WatchOptions are the flags of `collbench watch`.
type WatchOptions struct {
	IO      *IOStreams
	Factory *Factory
	Ctx     context.Context

	Listen  string
	For     time.Duration
	Persist time.Duration
	Output  string // -o: the JSON record
	Prom    string // --prom: node-exporter's textfile
	// PluginPath: print where the NCCL plugin is and stop.
	PluginPath bool
	// Executable is this program's path (os.Executable; tests set it).
	Executable func() (string, error)
}

// NewCmdWatch builds `collbench watch`.
func NewCmdWatch(f *Factory, runF func(*WatchOptions) error) *cobra.Command {
	o := &WatchOptions{IO: f.IO, Factory: f, Executable: os.Executable}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Collect a running job's summaries of its collectives and name a rank persistently later than its peers",
		Long: `watch is the collector of a running job: each process of the job that has
COLLBENCH_WATCH=host:port (this collector's address) and the job's secret
(COLLBENCH_TOKEN, the same here) sends a summary of every collective its ranks run,
and watch joins them by communicator and operation and prints a line when a rank is
later than its peers in most of its last 32 operations of one collective, and has
stayed so for --persist (2 s; a shorter burst is not a slow part): which rank, host
and GPU, why (its host issued late, or its GPU started late), by how much and since
which operation; and a line when it is no longer late. Each collective is judged
apart: a GPU that other work slows starts late the collective after its compute,
while those queued behind it start with its peers. Where the job's processes measure
what each rank sends each peer (collbench's cpu backend, and the plugin for NCCL's
network sends), it also names a link that sends at less than half the median link's
rate in most of its operations (its two ends, their hosts, its rate and the
median's), or a rank all of whose links are that slow.

A job's process never waits for the collector: summaries that cannot be sent are
dropped and counted, and a collector that does not answer or refuses the secret costs
one line on the job's stderr. collbench's own cpu backend sends summaries across
processes; an NCCL application (PyTorch, for one) sends them through collbench's
NCCL profiler plugin: set NCCL_PROFILER_PLUGIN to the path --plugin-path prints
(make plugin builds it beside the binary, make install under lib/collbench).

Each named rank comes with the doctor command that would confirm it on its node once
drained. -o keeps a JSON record of every finding and of what stands, --prom the
standing ones for node-exporter's textfile collector; both are rewritten whole after
each finding and every 10 s with what the collector has taken in (processes,
summaries received and dropped, operations judged), so the files are valid at every
instant.

watch runs until interrupted, or for --for; at the end it says what it judged (a
watch that judged nothing says why), and it exits 1 when a rank or link stands named.`,
		Args: noArgs,
		Example: "  COLLBENCH_TOKEN=$SECRET collbench watch --listen :29600\n  COLLBENCH_TOKEN=$SECRET COLLBENCH_WATCH=node01:29600 collbench launch -n 4 -- sweep --backend cpu\n" +
			"  NCCL_PROFILER_PLUGIN=$(collbench watch --plugin-path) COLLBENCH_WATCH=node01:29600 COLLBENCH_TOKEN=$SECRET torchrun --nproc-per-node 8 train.py",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return watchRun(o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Listen, "listen", ":29600", "address to collect on (host:port or :port)")
	fs.DurationVar(&o.For, "for", 0, "stop after this long (0: until interrupted)")
	fs.DurationVar(&o.Persist, "persist", 2*time.Second, "how long a rank or link must stay late or slow before it is named (0: at once)")
	fs.StringVarP(&o.Output, "output", "o", "", "keep a JSON record of every finding and of what stands in FILE")
	fs.StringVar(&o.Prom, "prom", "", "keep the standing findings for node-exporter's textfile collector in FILE")
	fs.BoolVar(&o.PluginPath, "plugin-path", false, "print the path of the NCCL profiler plugin an application loads to send summaries (NCCL_PROFILER_PLUGIN), and exit")
	return cmd
}

// watchRun runs collbench watch: the collector listens for the ranks'
// reports, each finding is printed as it comes, and -o and --prom get the
// latest record through writers that never hold the collector up; at the
// end each is written within watchFinalWrite or named as not written.
func watchRun(o *WatchOptions) error {
	if o.PluginPath {
		exe, err := o.Executable()
		if err != nil {
			return &engine.RunError{Err: fmt.Errorf("cannot tell where this program is: %v", err)}
		}
		p, err := engine.WatchPluginPath(exe)
		if err != nil {
			return err
		}
		fmt.Fprintln(o.IO.Out, p)
		return nil
	}
	j := engine.WatchJob{Findings: o.IO.Out, FinalWrite: watchFinalWrite,
		OnWrote: func(out engine.WatchOutput) { sayWrote(o.IO.ErrOut, out.What, out.Path) }}
	for _, out := range []struct {
		flag, what, path string
		prom             bool
	}{{"--output", "the watch record", o.Output, false}, {"--prom", "the standing findings for Prometheus", o.Prom, true}} {
		if out.path == "" {
			continue
		}
		if out.path == "-" {
			return engine.UsageErrorf("%s -: watch prints its findings on standard output; give %s a file", out.flag, out.flag)
		}
		t, err := outputTarget(out.flag, out.path)
		if err != nil {
			return err
		}
		j.Outputs = append(j.Outputs, engine.WatchOutput{Target: t, Prom: out.prom, What: out.what, Path: out.path})
	}
	j.Watch = engine.Watch{Listen: o.Listen, For: o.For, Persist: o.Persist,
		OnListening: func(addr string) {
			fmt.Fprintf(o.IO.ErrOut, "collbench watch: collecting on %s (the job needs %s=<this host>:<port> and the same COLLBENCH_TOKEN)\n", addr, "COLLBENCH_WATCH")
		},
		OnNote: func(n string) { fmt.Fprintf(o.IO.ErrOut, "collbench watch: %s\n", n) },
	}
	verdict, err := o.Factory.RunWatchJob(o.Ctx, j)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.ErrOut, "collbench watch: %s\n", verdict)
	return nil
}
