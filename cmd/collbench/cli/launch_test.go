package cli

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"collbench/doctor"
	"collbench/engine"
	"collbench/results"
)

// TestMain lets the test binary run as collbench itself when CB_CLI_CHILD is
// set, so launch can start real processes of it.
func TestMain(m *testing.M) {
	if os.Getenv("CB_CLI_CHILD") == "1" {
		if m := childFakeMachine(os.Getenv("CB_CLI_FAKE_GPU")); m != nil {
			os.Exit(MainWith(childFactory(m), os.Args[1:]))
		}
		os.Exit(Main(os.Args[1:]))
	}
	// Every process a test starts from this binary (launch's ranks, the
	// probe child) acts as collbench; set once here, so that tests need not
	// set it themselves and can run in parallel.
	if err := os.Setenv("CB_CLI_CHILD", "1"); err != nil {
		panic(err)
	}
	// Doctor's idle window samples constant mock figures here: a short one
	// sees them as well.
	engine.IdleWindow = 60 * time.Millisecond
	doctor.SustainWindow = 40 * time.Microsecond // the modeled kernels and time slices are microseconds
	os.Exit(m.Run())
}

// launchSelf runs `collbench launch ARGS` with this test binary as the
// collbench it starts.
func launchSelf(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	f, out, errOut := testFactory()
	cmd := NewCmdLaunch(f, func(o *LaunchOptions) error {
		o.Binary = os.Args[0]
		return launchRun(o)
	})
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	return engine.ExitCode(err), out.String(), errOut.String()
}

func TestLaunchFormsWorld(t *testing.T) {
	t.Parallel()
	code, out, errOut := launchSelf(t, "-n", "3", "--", "world")
	if code != 0 || !strings.Contains(out, "world of 3 processes, launched by collbench launch, joined over TCP") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"    0 |", "    1 |", "    2 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("rank row %q missing:\n%s", want, out)
		}
	}
}

// TestLaunchRunsVerifiedCollectiveAcrossSimulatedNodes runs the CPU backend
// in four processes split into two simulated nodes, with cross-node groups.
func TestLaunchRunsVerifiedCollectiveAcrossSimulatedNodes(t *testing.T) {
	t.Parallel()
	code, out, errOut := launchSelf(t, "-n", "4", "--nodes", "2", "--", "sweep", "--backend", "cpu", "--collectives", "all",
		"--sizes", "1K,4K", "-n", "1", "-w", "1", "--rank-list", "cross-node", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	d, err := results.Read(strings.NewReader(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if d.Config.Processes != 4 || d.Config.Launcher != "collbench launch" || !d.Summary.OK || len(d.Results) != 22 {
		t.Fatalf("config %+v summary %+v rows %d", d.Config, d.Summary, len(d.Results))
	}
	if len(d.Config.Groups) != 2 || d.Config.Groups[0][0] != 0 || d.Config.Groups[0][1] != 2 {
		t.Fatalf("cross-node groups %v", d.Config.Groups)
	}
	hosts := map[string]int{}
	for _, c := range d.Communicators {
		hosts[c.Host]++
		if c.LocalSize != 1 {
			t.Errorf("cross-node group members are on different hosts: %+v", c)
		}
	}
	if len(hosts) != 2 {
		t.Errorf("want two simulated hosts, got %v", hosts)
	}
	if len(d.Results[0].OutOfPlace.RankTimeUS) != 4 {
		t.Errorf("per-rank times from every process: %v", d.Results[0].OutOfPlace.RankTimeUS)
	}
	if strings.Contains(errOut, "disconnected") {
		t.Errorf("a clean run reported a lost rank: %s", errOut)
	}
}

func TestLaunchPassesWorstExitCode(t *testing.T) {
	code, out, errOut := launchSelf(t, "-n", "2", "--", "allreduce", "--sizes", "0", "--backend", "cpu")
	if code != engine.ExitUsage || out != "" || strings.Count(errOut, "collbench: invalid size") != 1 {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
}

// TestLaunchSaysARefusalOnce: a refusal every rank reaches alike (here a
// size that fits no rank's memory) is printed once, not once per rank.
func TestLaunchSaysARefusalOnce(t *testing.T) {
	t.Parallel()
	code, _, errOut := launchSelf(t, "-n", "4", "--", "allreduce", "--sizes", "1T", "--backend", "cpu", "-q")
	if code != engine.ExitUsage || strings.Count(errOut, "cannot fit in memory") != 1 {
		t.Fatalf("exit %d, the refusal printed %d times:\n%s", code, strings.Count(errOut, "cannot fit in memory"), errOut)
	}
}

func TestLaunchBadInput(t *testing.T) {
	for _, args := range [][]string{{"-n", "-1", "--", "world"}, {"-n", "4", "--nodes", "3", "--", "world"}, {"-n", "2"}, {"-n", "2", "--", "launch"}} {
		code, _, errOut := launchSelf(t, args...)
		if code != engine.ExitUsage || strings.Count(errOut, "\n") > 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestMPILaunchWithoutMPIRefuses checks that a process started by mpirun
// in a build without MPI refuses to run alone.
func TestMPILaunchWithoutMPIRefuses(t *testing.T) {
	f, out, errOut := testFactory()
	f.Environ = func() []string { return []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4"} }
	code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "8")
	if code != engine.ExitUsage || out.Len() != 0 || !strings.Contains(errOut.String(), "refusing to run 4 unconnected copies") ||
		!strings.Contains(errOut.String(), "make build-mpi") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	f, _, errOut = testFactory()
	f.Environ = func() []string { return []string{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"} }
	if code := run(t, f, "allreduce", "--backend", "cpu", "-g", "2"); code != engine.ExitUsage || !strings.Contains(errOut.String(), "every process drives one rank") {
		t.Fatalf("-g under a launcher: exit %d, %q", code, errOut)
	}
}

// TestLaunchNamesTheRefusalOnce: rank 0 refuses an output path it cannot
// write once the world has formed; the launch exits 2 with that cause,
// and rank 1 says it stopped on rank 0's word, not that rank 0 sent a
// malformed data address (as it read the exchange rank 0 left).
func TestLaunchNamesTheRefusalOnce(t *testing.T) {
	code, out, errOut := launchSelf(t, "-n", "2", "--", "allreduce", "--backend", "cpu", "--sizes", "8", "-o", "/nonexistent/d/x.json")
	all := out + errOut
	if code != engine.ExitUsage || !strings.Contains(all, "the cause: rank 0") || !strings.Contains(all, "/nonexistent/d does not exist") || strings.Contains(all, "malformed") {
		t.Fatalf("exit %d:\n%s", code, all)
	}
	t.Logf("%s", all)
}
