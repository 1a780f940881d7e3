package engine

import (
	"context"
	"fmt"

	"collbench/doctor"
)

// Simulate runs doctor on a cluster model (doctor.Simulate) and classifies
// its end as for a real run: an unhealthy verdict is a *CheckFailedError,
// a failure of the run a *RunError.
func Simulate(ctx context.Context, s doctor.Simulation) (*doctor.Report, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	rep, err := doctor.Simulate(ctx, s)
	if err != nil {
		return rep, &RunError{Err: err}
	}
	if !rep.Healthy {
		return rep, &CheckFailedError{Msg: fmt.Sprintf("doctor: %d finding(s) on the model; the verdict is above", len(rep.Findings))}
	}
	return rep, nil
}
