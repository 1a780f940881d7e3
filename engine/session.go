package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"collbench/backend/cpu"
	mpib "collbench/backend/mpi"
	"collbench/bootstrap"
	"collbench/internal/faults"
	"collbench/measure"
)

// ProcessWorld is this process's membership in a world of processes; nil
// fields mean a single process.
type ProcessWorld struct {
	Launch *bootstrap.Launch
	Ctl    measure.Control
	// MPI is the process's MPI membership when mpirun started the world
	// (MPI builds only); nil otherwise.
	MPI *bootstrap.MPI
	// faulted is set once a run of this world ended on a fault (a process
	// failed, hung or went silent, or a signal stopped it): Close then does
	// not wait on the others at MPI_Finalize.
	faulted atomic.Bool
}

// MarkFaulted records that a run of this world ended on a fault.
func (p *ProcessWorld) MarkFaulted() {
	if p != nil {
		p.faulted.Store(true)
	}
}

// mpiFinalizeBound is how long a process waits for the others at
// MPI_Finalize before it leaves MPI to end with the process.
const mpiFinalizeBound = 10 * time.Second

// Close ends the control connection, then MPI where the world has it.
func (p *ProcessWorld) Close() {
	if !p.Multi() {
		return
	}
	_ = p.Ctl.Close()
	// After a fault MPI_Finalize cannot complete: a process it waits for
	// has failed or hangs. MPI then ends with the process.
	if p.MPI != nil && !p.faulted.Load() {
		_ = p.MPI.Finalize(mpiFinalizeBound)
	}
}

func (p *ProcessWorld) Multi() bool { return p != nil && p.Ctl != nil }

// Rank0 reports whether this process prints and writes results.
func (p *ProcessWorld) Rank0() bool { return !p.Multi() || p.Ctl.Rank() == 0 }

// CtlTCP returns the TCP control connection, if the world has one.
func (p *ProcessWorld) CtlTCP() (*bootstrap.TCP, bool) {
	if !p.Multi() {
		return nil, false
	}
	t, ok := p.Ctl.(*bootstrap.TCP)
	return t, ok
}

// HostIdentity is what this process reports as its host: NCCL_HOSTID when
// set (so simulated nodes group as NCCL sees them), then COLLBENCH_HOST,
// then the hostname.
func (f *System) HostIdentity() string {
	if v := f.Getenv("NCCL_HOSTID"); v != "" {
		return v
	}
	if v := f.Getenv(bootstrap.EnvHost); v != "" {
		return v
	}
	h, _ := f.Hostname()
	return h
}

func (f *System) Getenv(k string) string {
	prefix := k + "="
	for _, kv := range f.Environ() {
		if strings.HasPrefix(kv, prefix) {
			return kv[len(prefix):]
		}
	}
	return ""
}

// DetectLaunch reads the launcher's variables; errors are usage errors.
func (f *System) DetectLaunch() (*bootstrap.Launch, error) {
	l, err := bootstrap.Detect(f.Getenv)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return l, nil
}

// JoinProcesses forms the world of processes the launch describes: over TCP
// when there is a rendezvous address, over MPI in MPI builds, and otherwise
// refuses rather than run as unconnected single processes.
func (f *System) JoinProcesses(ctx context.Context, l *bootstrap.Launch, args []string, timeout, silence time.Duration) (*ProcessWorld, error) {
	pw := &ProcessWorld{Launch: l}
	if !l.MultiProcess() {
		return pw, nil
	}
	switch {
	case l.RootAddr != "":
		token, err := bootstrap.LoadSecret(f.Getenv)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		fanout := 0
		if v := f.Getenv(bootstrap.EnvFanout); v != "" {
			if fanout, err = strconv.Atoi(v); err != nil || fanout < 1 || fanout > 1024 {
				return nil, &UsageError{Err: fmt.Errorf("%s=%q is not a fanout (want a whole number from 1 to 1024; rank 0's holds for the job)", bootstrap.EnvFanout, v)}
			}
		}
		t, err := bootstrap.Join(ctx, bootstrap.TCPOptions{Rank: l.Rank, Size: l.Size, Addr: l.RootAddr,
			Host: f.HostIdentity(), Args: args, Timeout: timeout, Token: token, Silence: silence, Fanout: fanout,
			Warn: func(s string) { fmt.Fprintln(f.Stderr, "collbench: "+s) }})
		if err != nil {
			return nil, &RunError{fmt.Errorf("forming the world of %d processes (%s): %w", l.Size, l.Source, err)}
		}
		pw.Ctl = t
	case bootstrap.HasMPI:
		// MPI starts the world and shares rank 0's rendezvous address; the
		// control connection is the same TCP tree, with heartbeats, as
		// under any launcher.
		m, err := bootstrap.JoinMPI()
		if err != nil {
			return nil, &RunError{err}
		}
		if m.Size() != l.Size || m.Rank() != l.Rank {
			return nil, &RunError{fmt.Errorf("MPI says rank %d of %d, the %s environment rank %d of %d", m.Rank(), m.Size(), l.Source, l.Rank, l.Size)}
		}
		pw.MPI = m
		t, err := bootstrap.JoinOverMPI(ctx, m, bootstrap.TCPOptions{Host: f.HostIdentity(), Args: args, Timeout: timeout, Silence: silence,
			Warn: func(s string) { fmt.Fprintln(f.Stderr, "collbench: "+s) }})
		if err != nil {
			return nil, &RunError{fmt.Errorf("forming the world of %d processes (%s, rendezvous shared over MPI): %w", l.Size, l.Source, err)}
		}
		pw.Ctl = t
	default:
		return nil, UsageErrorf("started by %s as rank %d of %d (%s), but this collbench has no MPI and no rendezvous address: "+
			"build it with make build-mpi, or set %s=<rank-0 host>:<port> for every rank (refusing to run %d unconnected copies)",
			l.Source, l.Rank, l.Size, strings.Join(l.Evidence, " "), bootstrap.EnvRootAddr, l.Size)
	}
	return pw, nil
}

// checkMem refuses memory a backend does not run on: the cpu and mpi
// backends use host memory, NCCL device memory.
func checkMem(backend, mem string) error {
	switch {
	case mem == "device" && backend == "cpu":
		return UsageErrorf("--mem device: the cpu backend runs on host memory only; use --backend nccl for GPU memory")
	case mem == "device" && backend == mpib.Name:
		return UsageErrorf("--mem device with --backend mpi: %s", mpib.DeviceNote())
	case mem == "host" && backend == "nccl":
		return UsageErrorf("--mem host: the nccl backend runs on GPU memory; use --backend mpi or cpu for host memory")
	}
	return nil
}

// setThreads gives the backend the issuing mode asked for; a backend
// without GPUs refuses one.
func setThreads(b measure.Backend, mode string) error {
	t, ok := b.(measure.Threaded)
	if !ok {
		if mode != "" {
			return UsageErrorf("--threads %s: the %s backend has no GPUs to issue for; --threads applies to --backend nccl", mode, b.Name())
		}
		return nil
	}
	if err := t.SetThreads(mode); err != nil {
		return &UsageError{Err: err}
	}
	return nil
}

// WorldSize checks the backend against the launch and returns the number of
// ranks: the launcher's world size, or ranks (0: the backend's default).
func WorldSize(b measure.Backend, l *bootstrap.Launch, ranks int) (int, error) {
	if !l.MultiProcess() {
		if b.Name() == mpib.Name {
			return 0, UsageErrorf("--backend mpi runs one rank per process, started by mpirun: mpirun -np N bin/collbench-mpi %s ... --backend mpi (no MPI launcher was found)",
				"<command>")
		}
		if ranks == 0 {
			return b.DefaultRanks(), nil
		}
		if b.Name() == "cpu" && ranks > cpu.MaxRanks {
			return 0, UsageErrorf("--ranks %d: the cpu backend runs at most %d ranks in one process (each is a goroutine on this host's %d cores; "+
				"a sweep past that takes hours); use fewer ranks, or processes: collbench launch -n N", ranks, cpu.MaxRanks, runtime.NumCPU())
		}
		if b.Name() == "nccl" && ranks > b.DefaultRanks() {
			return 0, UsageErrorf("--ranks %d: the nccl backend runs one rank per GPU and this process sees %d GPU(s); use --ranks %d or fewer (CUDA_VISIBLE_DEVICES chooses which)",
				ranks, b.DefaultRanks(), b.DefaultRanks())
		}
		return ranks, nil
	}
	if ranks > 1 {
		return 0, UsageErrorf("--ranks %d: under %s every process drives one rank (this world has %d); leave --ranks out", ranks, l.Source, l.Size)
	}
	if _, ok := b.(measure.DistributedBackend); !ok {
		return 0, UsageErrorf("the %s backend cannot run across processes", b.Name())
	}
	return l.Size, nil
}

// OpenWorld opens n ranks in this process, or this process's rank of a
// world of processes on its device (--device, COLLBENCH_DEVICE, or the
// local rank).
func (f *System) OpenWorld(ctx context.Context, b measure.Backend, pw *ProcessWorld, n, device int) (measure.World, error) {
	if !pw.Multi() {
		w, err := b.Open(ctx, n)
		if err != nil {
			return nil, &RunError{fmt.Errorf("opening %d ranks on the %s backend: %w", n, b.Name(), err)}
		}
		return w, nil
	}
	device = f.LocalDevice(pw, device)
	w, err := b.(measure.DistributedBackend).OpenDistributed(ctx, pw.Ctl, device)
	if err != nil {
		err = fmt.Errorf("rank %d: opening the %s backend on local device %d: %w", pw.Launch.Rank, b.Name(), device, err)
		pw.Ctl.Abort(err)
		return nil, &RunError{err}
	}
	return w, nil
}

// LocalDevice is the device this process's rank drives under a launcher:
// --device, COLLBENCH_DEVICE, or the local rank.
func (f *System) LocalDevice(pw *ProcessWorld, device int) int {
	if device >= 0 {
		return device
	}
	if v, err := strconv.Atoi(f.Getenv(bootstrap.EnvDevice)); err == nil && v >= 0 {
		return v
	}
	return pw.Launch.LocalRank
}

// Session is what every command that runs collectives settles first: the
// backend, the launch, the world size, the other processes and their hosts.
type Session struct {
	Choice BackendChoice
	Launch *bootstrap.Launch
	N      int
	PW     *ProcessWorld
	Hosts  []string
}

// CloseAfter ends the session after a run that returned err. A refusal
// this process reached alone (UsageError.Own: an output path it cannot
// write) is told to every process first, so the others stop naming it,
// rather than misreading the exchange it left ("rank 0 sent a malformed
// data address"). A refusal every process reaches alike is not: each
// says it, and the launcher names it once.
func (s *Session) CloseAfter(err error) {
	var ue *UsageError
	if errors.As(err, &ue) && ue.Own && s.PW.Multi() {
		s.PW.MarkFaulted()
		s.PW.Ctl.Abort(err)
	}
	s.Close()
}

// Close ends the connection to the other processes, if any.
func (s *Session) Close() {
	if s.PW.Multi() {
		s.PW.Close()
	}
}

// StartSession chooses the backend, reads the launcher's variables, sizes
// the world, lets check refuse bad input before any rendezvous, then joins
// the other processes. The caller closes the session.
func (f *System) StartSession(ctx context.Context, backend, ncclLib string, ranks int, rf RunFlags, check func(n int) error) (*Session, error) {
	if err := rf.Validate(); err != nil {
		return nil, err
	}
	choice, err := f.ChooseBackend(backend, ncclLib)
	if err != nil {
		return nil, err
	}
	if err := checkMem(choice.Backend.Name(), rf.Mem); err != nil {
		return nil, err
	}
	if err := setThreads(choice.Backend, rf.Threads); err != nil {
		return nil, err
	}
	launch, err := f.DetectLaunch()
	if err != nil {
		return nil, err
	}
	n, err := WorldSize(choice.Backend, launch, ranks)
	if err != nil {
		return nil, err
	}
	if fs, err := f.plantedFaults(); err != nil {
		return nil, err
	} else if err := fs.FitsWorld(n); err != nil {
		return nil, &UsageError{Err: err}
	} else if err := faultsFitBackend(fs, choice.Backend.Name(), launch.MultiProcess()); err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(n); err != nil {
			return nil, err
		}
	}
	pw, err := f.JoinProcesses(ctx, launch, f.Args[1:], rf.BootstrapTimeout, rf.Silence())
	if err != nil {
		return nil, err
	}
	if spec := f.Getenv(faults.EnvFaults); spec != "" && pw.Rank0() {
		fmt.Fprintf(f.Stderr, "collbench: planted faults (%s, a testing option): %s\n", faults.EnvFaults, spec)
	}
	s := &Session{Choice: choice, Launch: launch, N: n, PW: pw, Hosts: f.LocalHosts(n)}
	if pw.Multi() {
		s.Hosts = pw.Ctl.Hosts()
	}
	return s, nil
}

// plantedBy lists the kinds of fault each backend plants, in one process
// and with a process per rank (where the fault is applied: backend/cpu's
// cpu.go, distributed.go and mesh.go, backend/nccl's rank.go, backend/mpi's
// mpi.go). probeFaults are planted by the algorithm probe
// (backend/nccl/probe) whatever the backend.
var plantedBy = map[string][2][]string{
	"cpu":  {{"hang", "corrupt", "slow-rank", "slow-host"}, {"hang", "kill", "stop", "corrupt", "slow-rank", "slow-host", "slow-link", "delay-link", "late-rank"}},
	"nccl": {{"hang", "late-rank"}, {"hang", "kill", "stop", "late-rank"}},
	"mpi":  {{"hang", "kill", "stop"}, {"hang", "kill", "stop"}},
}

var probeFaults = []string{"probe-hang", "probe-exit", "probe-drop"}

// faultsFitBackend refuses planted faults the backend would leave out:
// the run would go on as if healthy, and a test or drill relying on the
// fault would pass for the wrong reason.
func faultsFitBackend(fs *faults.Set, backend string, multi bool) error {
	lists, ok := plantedBy[backend]
	if !ok || fs == nil {
		return nil
	}
	plants, where := lists[0], "in one process"
	if multi {
		plants, where = lists[1], "with a process per rank"
	}
	plants = append(slices.Clip(plants), probeFaults...)
	left := fs.Unplanted(plants)
	if len(left) == 0 {
		return nil
	}
	hint := ""
	if !multi && slices.Contains(lists[1], left[0]) {
		hint = "; run a process per rank (collbench launch -n N) to plant it"
	}
	return UsageErrorf("%s=%q: the %s backend %s does not plant %s (it plants %s)%s",
		faults.EnvFaults, fs.String(), backend, where, strings.Join(left, ", "), strings.Join(plants, ", "), hint)
}
