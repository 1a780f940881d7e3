package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"collbench/bootstrap"
)

// LaunchOptions are the flags of `collbench launch`.
type LaunchOptions struct {
	IO     *IOStreams
	Ctx    context.Context
	Procs  int
	Nodes  int
	Port   int
	Args   []string
	Binary string // the collbench to start; this executable by default
}

// NewCmdLaunch builds `collbench launch`.
func NewCmdLaunch(f *Factory, runF func(*LaunchOptions) error) *cobra.Command {
	o := &LaunchOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "launch -n N [--nodes K] -- COMMAND [FLAGS]",
		Short: "Start N collbench processes on this host, one GPU each, as one world",
		Long: `launch starts N processes of collbench on this host, one per GPU, wires their
environment (rank, world size, local rank, rendezvous address) and streams their
output: rank 0's unchanged, the others' prefixed with their rank. It exits with
the worst exit code of its processes; Ctrl-C stops them all.

--nodes K splits the processes into K simulated nodes (different NCCL_HOSTID), so
NCCL treats them as separate hosts and uses its network transport between them.`,
		Example: "  collbench launch -n 4 -- allreduce --sizes 8:1G\n  collbench launch -n 4 --nodes 2 -- sweep --collectives all\n  collbench launch -n 4 -- world",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("launch needs a collbench command to run, e.g. collbench launch -n 4 -- allreduce")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			o.Args = args
			if runF != nil {
				return runF(o)
			}
			return launchRun(o)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().IntVarP(&o.Procs, "procs", "n", 0, "number of processes (default: one per visible GPU, or 4 without GPUs)")
	cmd.Flags().IntVar(&o.Nodes, "nodes", 1, "simulated nodes the processes are split into (different NCCL_HOSTID)")
	cmd.Flags().IntVar(&o.Port, "port", 0, "rendezvous port on 127.0.0.1 (default: a free port)")
	return cmd
}

func launchRun(o *LaunchOptions) error {
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Procs == 0 {
		o.Procs = visibleGPUs()
	}
	switch {
	case o.Procs < 1:
		return usageErrorf("invalid -n %d: must be at least 1", o.Procs)
	case o.Nodes < 1 || o.Procs%o.Nodes != 0:
		return usageErrorf("invalid --nodes %d: must divide the %d processes evenly", o.Nodes, o.Procs)
	case o.Args[0] == "launch":
		return usageErrorf("launch cannot start launch")
	}
	bin := o.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return &RunError{fmt.Errorf("finding collbench's own executable: %w", err)}
		}
		bin = exe
	}
	port := o.Port
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return &RunError{fmt.Errorf("finding a free port: %w", err)}
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	perNode := o.Procs / o.Nodes
	host, _ := os.Hostname()
	type child struct {
		cmd  *exec.Cmd
		code int
		done chan struct{}
	}
	var children []*child
	var outMu sync.Mutex
	var wg sync.WaitGroup
	for r := 0; r < o.Procs; r++ {
		cmd := exec.Command(bin, o.Args...)
		cmd.Env = append(os.Environ(),
			bootstrap.EnvRank+"="+strconv.Itoa(r),
			bootstrap.EnvSize+"="+strconv.Itoa(o.Procs),
			bootstrap.EnvLocalRank+"="+strconv.Itoa(r%perNode),
			bootstrap.EnvLocalSize+"="+strconv.Itoa(perNode),
			bootstrap.EnvRootAddr+"=127.0.0.1:"+strconv.Itoa(port),
			bootstrap.EnvDevice+"="+strconv.Itoa(r),
		)
		if o.Nodes > 1 {
			cmd.Env = append(cmd.Env, fmt.Sprintf("NCCL_HOSTID=%s-node%d", host, r/perNode))
		}
		ch := &child{cmd: cmd, done: make(chan struct{})}
		var streams []io.ReadCloser
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		streams = append(streams, stdout, stderr)
		if err := cmd.Start(); err != nil {
			for _, c := range children {
				_ = c.cmd.Process.Kill()
			}
			return &RunError{fmt.Errorf("starting rank %d: %w", r, err)}
		}
		for i, s := range streams {
			dst := o.IO.Out
			if i == 1 {
				dst = o.IO.ErrOut
			}
			prefix := ""
			if r != 0 {
				dst, prefix = o.IO.ErrOut, fmt.Sprintf("[rank %d] ", r)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc := bufio.NewScanner(s)
				sc.Buffer(make([]byte, 64<<10), 16<<20)
				for sc.Scan() {
					outMu.Lock()
					fmt.Fprintf(dst, "%s%s\n", prefix, sc.Text())
					outMu.Unlock()
				}
			}()
		}
		children = append(children, ch)
	}
	failed := make(chan int, o.Procs)
	for r, ch := range children {
		go func() {
			err := ch.cmd.Wait()
			ch.code = 0
			if ee, ok := err.(*exec.ExitError); ok {
				ch.code = ee.ExitCode()
				if ch.code < 0 {
					ch.code = ExitRunFailed // killed by a signal
				}
			} else if err != nil {
				ch.code = ExitRunFailed
			}
			if ch.code != 0 {
				failed <- r
			}
			close(ch.done)
		}()
	}
	allDone := make(chan struct{})
	go func() {
		for _, ch := range children {
			<-ch.done
		}
		close(allDone)
	}()
	signalAll := func(sig os.Signal) {
		for _, ch := range children {
			select {
			case <-ch.done:
			default:
				_ = ch.cmd.Process.Signal(sig)
			}
		}
	}
	var grace <-chan time.Time
loop:
	for {
		select {
		case <-allDone:
			break loop
		case <-ctx.Done():
			signalAll(syscall.SIGINT)
			grace = time.After(10 * time.Second)
			ctx = context.Background()
		case <-failed:
			// The others notice a failed rank themselves; stop stragglers.
			if grace == nil {
				grace = time.After(30 * time.Second)
			}
		case <-grace:
			signalAll(syscall.SIGKILL)
			grace = nil
		}
	}
	wg.Wait()
	worst := 0
	for _, ch := range children {
		worst = max(worst, ch.code)
	}
	if worst != 0 {
		return &exitCodeError{code: worst}
	}
	return nil
}

// exitCodeError passes a child's exit code through without a message (the
// child already printed one).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return "" }

// visibleGPUs counts GPUs through the NCCL backend, or returns 4 when there
// are none, as the CPU backend's default.
func visibleGPUs() int {
	if b, err := openNCCL(""); err == nil {
		return b.DefaultRanks()
	}
	return 4
}
