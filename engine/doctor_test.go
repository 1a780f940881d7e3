package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/nccl/fakegpu"
	"collbench/bootstrap"
	"collbench/doctor"
	"collbench/internal/nvmlmock"
	"collbench/measure"
)

// TestFaultFindingNamesThePart: each fault that can end a doctor run
// becomes the finding that names the rank at fault (or the run, for a
// signal), with the kind a dashboard can count.
func TestFaultFindingNamesThePart(t *testing.T) {
	who := func(r int) string { return fmt.Sprintf("rank %d (node-%d, GPU 0000:%02d:00.0)", r, r/8, r%8) }
	cases := []struct {
		err             error
		sev, kind, part string
		ranks           []int
	}{
		{&bootstrap.PeerError{Kind: bootstrap.FaultHung, Rank: 13, Msg: "watchdog: rank 13 has not finished"}, "FAIL", "hung-rank", "rank 13 (node-1, GPU 0000:05:00.0)", []int{13}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultSilent, Rank: 2, Msg: "rank 2 stopped answering"}, "FAIL", "silent-rank", "rank 2 (node-0, GPU 0000:02:00.0)", []int{2}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultDisconnected, Rank: 9, Msg: "rank 9 disconnected"}, "FAIL", "lost-rank", "rank 9 (node-1, GPU 0000:01:00.0)", []int{9}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultFailed, Rank: 4, Msg: "rank 4 failed: out of memory"}, "FAIL", "failed-rank", "rank 4 (node-0, GPU 0000:04:00.0)", []int{4}},
		{&bootstrap.PeerError{Kind: bootstrap.FaultInterrupted, Rank: 3, Msg: "rank 3 was interrupted"}, "WARN", "interrupted", "rank 3 (node-0, GPU 0000:03:00.0)", []int{3}},
		{&SignalError{Sig: syscall.SIGTERM}, "WARN", "interrupted", "the run", nil},
		{&RunError{Err: errors.New("ncclCommInitRank: unhandled system error")}, "FAIL", "run-failed", "the run", nil},
	}
	for _, c := range cases {
		f := faultFinding(c.err, who)
		if f.Severity != c.sev || f.Kind != c.kind || f.Part != c.part || !slices.Equal(f.Ranks, c.ranks) || f.Msg == "" || f.Cause == "" {
			t.Errorf("%v: %+v", c.err, f)
		}
	}
	if f := faultFinding(&SignalError{Sig: syscall.SIGTERM}, who); f.Msg != "the run was terminated before the verdict" {
		t.Errorf("signal: %q", f.Msg)
	}
}

// TestDoctorSkipsWhatCannotRunHere: on one rank of one host, the pair,
// across-hosts and whole-world stages are not announced as running; the
// report says why each was skipped, and its seconds are the whole run's.
func TestDoctorSkipsWhatCannotRunHere(t *testing.T) {
	sys, _ := testSystem()
	var said []string
	d := Doctor{Backend: "cpu", Ranks: 1, Knobs: doctor.Knobs{Quick: true}, RunFlags: DefaultRunFlags(), Progress: func(s string) { said = append(said, s) }}
	rep, err := sys.RunDoctor(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(said) != 1 || said[0] != "each rank alone" {
		t.Errorf("announced %q, want only the stage that runs", said)
	}
	want := map[string]string{"every rank pair within a host": "no host has two ranks", "across hosts": "one host", "the whole world": "one rank"}
	for _, s := range rep.Stages {
		if s.Skipped != want[s.Stage] {
			t.Errorf("stage %q: skipped %q, want %q", s.Stage, s.Skipped, want[s.Stage])
		}
	}
	if len(rep.Stages) != 4 || rep.Seconds < rep.Stages[0].Seconds || rep.Seconds <= 0 {
		t.Errorf("stages %+v, run %.3f s", rep.Stages, rep.Seconds)
	}
}

// TestDoctorNamesCountersThatGrow runs doctor on a fake 4-GPU HGX whose
// counters grow under its traffic, at several places: a marginal NVLink of
// GPU 2 (its CRC counter grows at every read), PCIe replays on GPU 0 far
// under the 8 a minute allowed, and a critical XID on GPU 3. The link is a
// WARN that names it with the traffic doctor moved, the XID a FAIL naming
// GPU 3, the replays pass; every stage's growth is in the report and the
// Prometheus file.
func TestDoctorNamesCountersThatGrow(t *testing.T) {
	hw := nvmlmock.HGX("H100")
	hw.GPUs = hw.GPUs[:4]
	for i := range hw.GPUs {
		hw.GPUs[i].Live = nvmlmock.NewCounters()
	}
	hw.GPUs[2].Live.DriftNVLink(5, nvml.NVLINK_ERROR_DL_CRC_DATA, 7)
	hw.GPUs[0].Live.AddPCIeReplays(0)
	hw.XIDs = make(chan nvmlmock.XID, 1)
	hw.XIDs <- nvmlmock.XID{GPU: 3, Code: 79}
	sys := machineSystem(fakegpu.New(hw, fakegpu.Options{Model: fakegpu.HealthyModel(1)}))
	d := Doctor{Backend: "nccl", Knobs: doctor.Knobs{BWSize: 256 << 10, CopySize: 256 << 10, WorldSize: 256 << 10, LatSize: 4 << 10, Iters: 3, Quick: true}, RunFlags: DefaultRunFlags()}
	rep, err := sys.RunDoctor(context.Background(), d)
	if rep == nil {
		t.Fatal(err)
	}
	var link, xid *doctor.Finding
	for i, f := range rep.Findings {
		switch {
		case f.Kind == "counter-growth" && strings.Contains(f.Msg, "GPU 2 (0000:3a:00.0) NVLink 5"):
			link = &rep.Findings[i]
		case f.Kind == "counter-growth" && strings.Contains(f.Part, "GPU 3 (0000:5d:00.0)"):
			xid = &rep.Findings[i]
		case f.Kind == "counter-growth":
			t.Errorf("unexpected %s", f.Line())
		}
	}
	if link == nil || link.Severity != "WARN" || link.Part != "host testhost" || !strings.Contains(link.Msg, "nvlink_crc_data grew past its normal rate on 1 NVLink") ||
		!strings.Contains(link.Msg, "by doctor's tally") {
		t.Errorf("the marginal link: %+v", link)
	}
	if xid == nil || xid.Severity != "FAIL" || !strings.Contains(xid.Msg, "XID 79") || rep.Healthy {
		t.Errorf("the XID: %+v (healthy %v)", xid, rep.Healthy)
	}
	stages := map[string]bool{}
	for _, g := range rep.Counters {
		if g.Counter == doctor.CtrNVLinkCRCData {
			stages[g.Stage] = true
			if g.Moved <= 0 && g.Stage != "each GPU alone" {
				t.Errorf("no traffic tallied over the link in %q", g.Stage)
			}
		}
	}
	if len(stages) < 3 {
		t.Errorf("the link grew in %d stage(s), want every stage that ran: %v", len(stages), stages)
	}
	if len(rep.Watched) != 1 || !strings.Contains(rep.Watched[0], "4 GPU(s), 72 NVLink(s), 0 port(s): ecc_corrected, ecc_uncorrected, nvlink_crc_data") || !strings.Contains(rep.Watched[0], "xid events") {
		t.Errorf("watched %q", rep.Watched)
	}
	var prom strings.Builder
	if err := doctor.WriteProm(rep, &prom); err != nil || !strings.Contains(prom.String(), `collbench_doctor_counter_growth{host="`) {
		t.Errorf("prom: %v\n%s", err, prom.String())
	}
}

// closeWaits is a backend whose worlds' Close waits for release: a world
// whose teardown hangs, as ending MPI does after a fault.
type closeWaits struct {
	measure.Backend
	closing, release chan struct{}
}

func (b closeWaits) Open(ctx context.Context, n int) (measure.World, error) {
	w, err := b.Backend.Open(ctx, n)
	if err != nil {
		return nil, err
	}
	return worldCloseWaits{w, b}, nil
}

type worldCloseWaits struct {
	measure.World
	b closeWaits
}

func (w worldCloseWaits) Close() error {
	close(w.b.closing)
	<-w.b.release
	return w.World.Close()
}

func (w worldCloseWaits) Abort(err error) {
	if a, ok := w.World.(measure.Aborter); ok {
		a.Abort(err)
	}
}

// TestDoctorReportsBeforeTheWorldCloses: rank 0's verdict goes to OnReport
// before the world and the session close, so a teardown that hangs (MPI
// after a fault, a launcher that kills the process meanwhile) cannot lose
// it; RunDoctor returns what OnReport returned.
func TestDoctorReportsBeforeTheWorldCloses(t *testing.T) {
	hw := nvmlmock.HGX("H100")
	hw.GPUs = hw.GPUs[:2]
	sys := machineSystem(fakegpu.New(hw, fakegpu.Options{Model: fakegpu.HealthyModel(1)}))
	b := closeWaits{closing: make(chan struct{}), release: make(chan struct{})}
	open := sys.NCCL
	sys.NCCL = func(lib string) (measure.Backend, error) {
		inner, err := open(lib)
		b.Backend = inner
		return b, err
	}
	reported := make(chan error, 1)
	mine := errors.New("the verdict as delivered")
	d := Doctor{Backend: "nccl", Knobs: doctor.Knobs{BWSize: 64 << 10, CopySize: 64 << 10, WorldSize: 64 << 10, LatSize: 4 << 10, Iters: 3, Quick: true},
		RunFlags: DefaultRunFlags(), OnReport: func(rep *doctor.Report, err error) error {
			select {
			case <-b.closing:
				t.Error("the world was closing before the verdict was delivered")
			default:
			}
			if rep == nil || len(rep.Completed) == 0 {
				t.Errorf("delivered %+v", rep)
			}
			reported <- err
			return mine
		}}
	done := make(chan error, 1)
	go func() {
		_, err := sys.RunDoctor(context.Background(), d)
		done <- err
	}()
	select {
	case err := <-reported:
		if err != nil {
			t.Errorf("a healthy run's verdict came with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no verdict within a minute")
	}
	<-b.closing
	close(b.release)
	if err := <-done; err != mine {
		t.Errorf("RunDoctor returned %v, want what OnReport returned", err)
	}
}
