package cli

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/spf13/cobra"

	"collbench/engine"
)

// StreamOptions are the flags of the hidden `collbench stream` command.
type StreamOptions struct {
	IO       *IOStreams
	Listen   string
	Connect  string
	Duration time.Duration
}

// NewCmdStream builds `collbench stream`: one plain TCP stream between two
// processes, the yardstick for the cpu backend's figures (scripts/cpu-bench.sh).
func NewCmdStream(f *Factory, runF func(*StreamOptions) error) *cobra.Command {
	o := &StreamOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:    "stream (--listen ADDR | --connect ADDR)",
		Short:  "Measure one plain TCP stream between two processes (a yardstick for the cpu backend)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return streamRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Listen, "listen", "", "receive on this address (host:port)")
	cmd.Flags().StringVar(&o.Connect, "connect", "", "send to this address (host:port)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 3*time.Second, "how long the sender sends")
	atLeast(cmd.Flags(), "1ns", "duration")
	cmd.MarkFlagsMutuallyExclusive("listen", "connect")
	return cmd
}

// streamRun measures one TCP stream between two hosts: one side listens
// and reports the rate it received, the other connects and sends.
func streamRun(o *StreamOptions) error {
	buf := make([]byte, 512<<10) // the cpu backend's piece size
	switch {
	case o.Listen != "" && o.Connect == "":
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return engine.ListenError(o.Listen, err)
		}
		defer ln.Close()
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
		c, err := ln.Accept()
		if err != nil {
			return &engine.RunError{Err: fmt.Errorf("no sender within a minute: %w", err)}
		}
		defer c.Close()
		var n int64
		start := time.Now()
		for {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			k, err := c.Read(buf)
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return &engine.RunError{Err: err}
			}
		}
		fmt.Fprintf(o.IO.Out, "stream: received %d bytes in %.2f s: %.2f GB/s\n", n, time.Since(start).Seconds(), float64(n)/time.Since(start).Seconds()/1e9)
		return nil
	case o.Connect != "" && o.Listen == "":
		var c net.Conn
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if c, err = net.DialTimeout("tcp", o.Connect, time.Second); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return &engine.RunError{Err: fmt.Errorf("cannot reach %s: %w", o.Connect, err)}
		}
		var n int64
		start := time.Now()
		for time.Since(start) < o.Duration {
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			k, err := c.Write(buf)
			n += int64(k)
			if err != nil {
				return &engine.RunError{Err: err}
			}
		}
		c.Close()
		fmt.Fprintf(o.IO.Out, "stream: sent %d bytes in %.2f s: %.2f GB/s\n", n, time.Since(start).Seconds(), float64(n)/time.Since(start).Seconds()/1e9)
		return nil
	}
	return engine.UsageErrorf("stream needs exactly one of --listen ADDR or --connect ADDR")
}
