package nccl

import (
	"errors"
	"fmt"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
	"collbench/measure"
)

// The rank's timing on its GPU: events between operations, and CUDA
// graphs of a row's launches.

// TimeEach records a GPU event between consecutive operations and returns
// each operation's time in µs.
func (r *rank) TimeEach(c measure.Call, iters int) ([]float64, error) {
	if err := r.eventsFor(iters + 1); err != nil {
		return nil, err
	}
	if err := r.drv.Record(r.events[0], r.stream); err != nil {
		return nil, err
	}
	for k := 0; k < iters; k++ {
		if err := r.Launch(c); err != nil {
			return nil, err
		}
		if err := r.drv.Record(r.events[k+1], r.stream); err != nil {
			return nil, err
		}
	}
	if err := r.Sync(); err != nil {
		return nil, err
	}
	out := make([]float64, iters)
	for k := range out {
		ms, err := r.drv.Elapsed(r.events[k], r.events[k+1])
		if err != nil {
			return nil, err
		}
		out[k] = float64(ms) * 1e3
	}
	return out, nil
}

// eventsFor makes sure the rank has at least n events, kept for reuse.
func (r *rank) eventsFor(n int) error {
	for len(r.events) < n {
		e, err := r.drv.NewEvent()
		if err != nil {
			return err
		}
		r.events = append(r.events, e)
	}
	return nil
}

// TimeOnDevice records an event before and after work on the rank's
// stream and returns the time between them.
func (r *rank) TimeOnDevice(work func() error) (float64, error) {
	if err := r.eventsFor(2); err != nil {
		return 0, err
	}
	if err := r.drv.Record(r.events[0], r.stream); err != nil {
		return 0, err
	}
	if err := work(); err != nil {
		return 0, err
	}
	if err := r.drv.Record(r.events[1], r.stream); err != nil {
		return 0, err
	}
	if err := r.Sync(); err != nil {
		return 0, err
	}
	ms, err := r.drv.Elapsed(r.events[0], r.events[1])
	return float64(ms) / 1e3, err
}

type graph struct {
	g driver.Graph
	s cuda.Stream
}

func (g *graph) Replay() error { return g.g.Launch(g.s) }
func (g *graph) Destroy()      { g.g.Destroy() }

// Capture records ops launches of c into a CUDA graph.
func (r *rank) Capture(c measure.Call, ops int) (measure.Graph, error) {
	if err := r.drv.BeginCapture(r.stream); err != nil {
		return nil, err
	}
	// Each GPU's thread captures its own stream, in both issuing modes:
	// a graph is replayed with one launch per GPU either way.
	var launchErr error
	r.capturing = true
	for k := 0; k < ops && launchErr == nil; k++ {
		launchErr = r.Launch(c)
	}
	r.capturing = false
	g, err := r.drv.EndCapture(r.stream)
	if launchErr != nil || err != nil {
		if g != nil {
			g.Destroy()
		}
		return nil, fmt.Errorf("capturing a CUDA graph: %w", errors.Join(launchErr, err))
	}
	return &graph{g: g, s: r.stream}, nil
}
