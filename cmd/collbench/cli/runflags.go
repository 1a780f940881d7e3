package cli

import (
	"github.com/spf13/pflag"

	"collbench/engine"
)

func addRunFlags(fs *pflag.FlagSet, o *engine.RunFlags) {
	d := engine.DefaultRunFlags()
	fs.IntVar(&o.Device, "device", d.Device, "under a launcher: the local GPU this process drives (-1: its local rank)")
	fs.DurationVar(&o.BootstrapTimeout, "bootstrap-timeout", d.BootstrapTimeout, "under a launcher: how long the processes may take to find each other")
	fs.DurationVar(&o.Timeout, "timeout", d.Timeout, "watchdog: stop the run when no rank makes progress for this long, naming the stuck ranks (at least 1s; 0 = off)")
	fs.DurationVar(&o.HeartbeatTimeout, "heartbeat-timeout", d.HeartbeatTimeout, "under a launcher: name a process that sends no heartbeat for this long (stopped, frozen or cut off)")
	fs.StringVar(&o.Mem, "mem", "", "the memory collectives run on: host or device (default: the backend's own: host for cpu and mpi, device for nccl)")
	fs.StringVar(&o.Threads, "threads", "", "nccl: how one process issues its GPUs' operations: per-gpu (a thread each, the default) or one (one thread, one group per step)")
	atLeast(fs, "-1", "device")
	atLeast(fs, "1ns", "bootstrap-timeout")
	atLeast(fs, "0s", "timeout")
	atLeast(fs, "2s", "heartbeat-timeout")
}
