package cli

import (
	"time"

	"github.com/spf13/pflag"

	"collbench/bootstrap"
	"collbench/engine"
	"collbench/watchdog"
)

func addRunFlags(fs *pflag.FlagSet, o *engine.RunFlags) {
	fs.IntVar(&o.Device, "device", -1, "under a launcher: the local GPU this process drives (-1: its local rank)")
	fs.DurationVar(&o.BootstrapTimeout, "bootstrap-timeout", 2*time.Minute, "under a launcher: how long the processes may take to find each other")
	fs.DurationVar(&o.Timeout, "timeout", watchdog.DefaultTimeout, "watchdog: stop the run when no rank makes progress for this long, naming the stuck ranks (0 = off)")
	fs.DurationVar(&o.HeartbeatTimeout, "heartbeat-timeout", bootstrap.DefaultSilence, "under a launcher: name a process that sends no heartbeat for this long (stopped, frozen or cut off)")
	atLeast(fs, "-1", "device")
	atLeast(fs, "1ns", "bootstrap-timeout")
	atLeast(fs, "0s", "timeout")
	atLeast(fs, "2s", "heartbeat-timeout")
}
