package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"collbench/backend/nccl"
	"collbench/backend/nccl/probe"
	"collbench/internal/tempdir"
	"collbench/measure"
	"collbench/results"
)

// EnvProbe, set to "always", runs the probe on the cpu backend too (which
// knows its algorithms without one): a check of the probe itself. "off"
// skips it on NCCL.
const EnvProbe = "COLLBENCH_ALGORITHM_PROBE"

// probeTimeout bounds the whole probe: opening the communicators and one
// operation per row.
// COLLBENCH_PROBE_TIMEOUT replaces it (tests plant hung probes).
func (f *System) probeTimeout(rf RunFlags) time.Duration {
	if d, err := time.ParseDuration(f.Getenv(EnvProbeTimeout)); err == nil && d > 0 {
		return d
	}
	return rf.BootstrapTimeout + time.Minute
}

// EnvProbeTimeout bounds the algorithm probe instead of the default.
const EnvProbeTimeout = "COLLBENCH_PROBE_TIMEOUT"

// probeAlgorithms runs the probe when the backend is NCCL (or when
// COLLBENCH_ALGORITHM_PROBE=always). It returns nil and a note when there is
// nothing to probe or the probe failed; only a cancelled run is an error.
func (f *System) probeAlgorithms(ctx context.Context, ss *Session, rf RunFlags, plan measure.Plan, cases []measure.Case, layout measure.Layout) (*probe.Result, string, error) {
	b := ss.Choice.Backend
	mode := strings.ToLower(f.Getenv(EnvProbe))
	want := (b.Name() == "nccl" && mode != "off") || mode == "always"
	if b.Name() != "nccl" && !want {
		// Every process runs the same backend: none has NCCL's choices
		// to probe, and there is nothing to agree on.
		return nil, "", nil
	}
	note := ""
	// A backend whose library reports its algorithms from inside the
	// measuring process (NCCL's profiler plugin) needs no probe.
	records, why := false, ""
	if rb, ok := b.(measure.RecordingBackend); ok && mode != "always" {
		records, why = rb.Records()
	}
	if records {
		want = false
	}
	if want && b.Name() == "nccl" {
		if ok, tuneWhy := nccl.TuningLogUsable(b.Info().VersionCode); !ok {
			want, note = false, "no algorithm per row: "+tuneWhy
		}
	}
	if ss.PW.Multi() {
		// Every process probes, or none: a host with another NCCL may say
		// no. A process that records needs no probe, but joins one.
		const cannot, probes, recordsOnly = 0, 1, 2
		flag := []byte{cannot}
		switch {
		case records:
			flag[0] = recordsOnly
		case want:
			flag[0] = probes
		}
		all, err := ss.PW.Ctl.AllGather(flag)
		if err != nil {
			return nil, "", &RunError{Err: err}
		}
		allRecord := true
		for _, v := range all {
			allRecord = allRecord && len(v) == 1 && v[0] == recordsOnly
		}
		want = !allRecord
		for r, v := range all {
			if len(v) != 1 || v[0] == cannot {
				if want && note == "" {
					note = fmt.Sprintf("no algorithm per row: rank %d cannot probe (another NCCL version, or %s=off there)", r, EnvProbe)
				}
				want = false
				break
			}
		}
		if want && records {
			// This process records, but another does not: the probe's
			// choices stand for every row.
			why = "another rank's NCCL does not load collbench's profiler plugin"
		}
	}
	if want && why != "" && b.Name() == "nccl" {
		note = "algorithms from the tuning-log probe (a second NCCL start): " + why
	}
	if !want {
		return nil, note, nil
	}
	dir, release, err := tempdir.Make("collbench-probe-")
	if err != nil {
		return nil, "no algorithm per row: " + err.Error(), nil
	}
	defer release()
	spec := probe.Spec{Backend: b.Name(), Ranks: ss.N, Plan: plan, Cases: cases, Groups: layout.Groups,
		LogFile: filepath.Join(dir, "nccl-tuning.log"), Size: ss.N}
	if b.Name() == "nccl" {
		spec.Lib = b.Info().Library
	}
	// The probe's only job is the choices: one operation per row.
	spec.Plan.Iters, spec.Plan.Warmup, spec.Plan.Check, spec.Plan.Cycles, spec.Plan.Agg = 1, 0, 0, 1, 1
	spec.Plan.IterStats, spec.Plan.GraphReplays = false, 0
	if ss.PW.Multi() {
		spec.Multi, spec.Rank, spec.Size, spec.Hosts = true, ss.PW.Ctl.Rank(), ss.PW.Ctl.Size(), ss.PW.Ctl.Hosts()
		spec.Device = f.LocalDevice(ss.PW, rf.Device)
		if t, ok := ss.PW.CtlTCP(); ok {
			spec.LocalIP = t.LocalIP()
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, "no algorithm per row: " + err.Error(), nil
	}
	var ctl measure.Control
	if ss.PW.Multi() {
		ctl = ss.PW.Ctl
	}
	res, err := probe.Run(ctx, ctl, exe, f.Environ(), spec, f.probeTimeout(rf))
	if ctx.Err() != nil {
		return nil, "", ctx.Err()
	}
	if err != nil {
		return nil, "no algorithm per row: the algorithm probe failed: " + err.Error(), nil
	}
	if res == nil { // a rank other than 0
		return nil, "", nil
	}
	if res.Note != "" {
		note = strings.TrimPrefix(note+"; "+res.Note, "; ")
	}
	return res, note, nil
}

// attachAlgorithms puts the probe's choices (group -> choice) on a row;
// they replace what the world said itself.
func attachAlgorithms(row *results.Row, choices map[int]*results.AlgoChoice) {
	if len(choices) == 0 {
		return
	}
	for gi := range row.Groups {
		if c := choices[gi]; c != nil {
			row.Groups[gi].Algorithm = c
		}
	}
	first := -1
	for gi := range choices {
		if choices[gi] != nil && (first < 0 || gi < first) {
			first = gi
		}
	}
	if first >= 0 {
		row.Algorithm = choices[first]
	}
}
