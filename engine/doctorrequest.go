package engine

import (
	"context"
	"fmt"

	"collbench/doctor"
)

// simulateDoctor runs d on the model of its cluster file, in this process,
// and delivers the verdict as a run on the world does.
func (f *System) simulateDoctor(ctx context.Context, d Doctor) (*doctor.Report, error) {
	model, err := doctor.LoadCluster(ctx, d.Cluster)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	if err := d.checkHistory(); err != nil {
		return nil, err
	}
	rep, runErr := Simulate(ctx, doctor.Simulation{Model: model, Knobs: d.Knobs, Thresholds: d.Thresholds, Expectations: d.Expectations, Progress: d.Progress})
	if rep == nil {
		return nil, runErr
	}
	return rep, f.deliverDoctor(d, rep, runErr)
}

// checkHistory says whether d's history directory can keep this run's
// records (nil without a history).
func (d Doctor) checkHistory() error {
	if d.History == "" {
		return nil
	}
	if err := doctor.CheckHistoryDir(d.History, d.HistoryRules.Runs); err != nil {
		return &UsageError{Err: err}
	}
	return nil
}

// deliverDoctor records rank 0's verdict in the node's history, then hands
// it to OnReport, and returns the error the run ends with: OnReport's own
// (the verdict could not be written), else runErr, else the history's (a
// history that fails after a failed run is one line on stderr).
func (f *System) deliverDoctor(d Doctor, rep *doctor.Report, runErr error) error {
	var historyErr error
	if d.History != "" {
		paths, err := doctor.ApplyHistory(rep, d.History, d.HistoryRules, f.Now(), d.Tool)
		if err != nil {
			historyErr = &UsageError{Err: err}
		}
		if d.OnHistory != nil {
			d.OnHistory(paths)
		}
	}
	if d.OnReport != nil {
		if err := d.OnReport(rep, runErr); err != nil {
			return err
		}
	}
	if historyErr == nil {
		return runErr
	}
	if runErr == nil {
		return historyErr
	}
	fmt.Fprintf(f.Stderr, "collbench: %v\n", historyErr)
	return runErr
}
