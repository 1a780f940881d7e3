package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/cpu"
	mpib "collbench/backend/mpi"
	"collbench/internal/faults"
	"collbench/measure"
	"collbench/results"
	"collbench/watch"
)

// System is what a run needs from the machine it runs on, so tests can
// replace any of it.
type System struct {
	// Stderr receives notices (the IO streams' error output).
	Stderr io.Writer
	// Args is the command line as typed, for result headers.
	Args     []string
	Hostname func() (string, error)
	Now      func() time.Time
	Environ  func() []string
	// CPUOptions configure the CPU backend (tests set a corruption hook).
	CPUOptions cpu.Options
	// NCCL opens the NCCL backend from the given library path ("" = search);
	// nil when this build has none.
	NCCL func(lib string) (measure.Backend, error)
	// NVML returns the NVML library to ask about GPUs (a mock in tests).
	NVML func() nvml.Interface
	// OwnsProcess lets a run that does not stop within a grace period after a
	// fault end the process (set by Main; never in tests, which run in the
	// test binary's process).
	OwnsProcess bool
}

// BackendChoice is the backend a command will use and why.
type BackendChoice struct {
	Backend measure.Backend
	Reason  string
	Auto    bool
}

// CPUBackend returns the CPU backend with the faults $COLLBENCH_FAULTS
// plants (a testing option), unless the factory already has some.
func (f *System) CPUBackend() (*cpu.Backend, error) {
	opts := f.CPUOptions
	if opts.Faults == nil {
		fs, err := f.plantedFaults()
		if err != nil {
			return nil, err
		}
		opts.Faults = fs
	}
	if opts.Watch == nil {
		if s := f.watchSink(); s != nil {
			opts.Watch = s
		}
	}
	return cpu.New(opts), nil
}

// plantedFaults are the faults $COLLBENCH_FAULTS plants (a testing
// option), nil for none; a malformed spec is a usage error.
func (f *System) plantedFaults() (*faults.Set, error) {
	fs, err := faults.Parse(f.Getenv(faults.EnvFaults))
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return fs, nil
}

// MPIBackend returns the mpi backend with the faults $COLLBENCH_FAULTS
// plants; in a build without MPI, a usage error naming the MPI build.
func (f *System) MPIBackend() (measure.Backend, error) {
	fs, err := f.plantedFaults()
	if err != nil {
		return nil, err
	}
	b, err := mpib.New(mpib.Options{MemoryLimit: f.CPUOptions.MemoryLimit, Faults: fs})
	if err != nil {
		return nil, UsageErrorf("--backend mpi: %v", err)
	}
	return b, nil
}

// ChooseBackend resolves --backend auto|cpu|nccl without printing anything.
func (f *System) ChooseBackend(name, ncclLib string) (BackendChoice, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if ncclLib != "" {
		// A library named by hand is checked before anything else, and
		// means NCCL is wanted: auto does not fall back to the cpu.
		// A bare name (libnccl.so.2) is the dynamic linker's to find;
		// a path must be a library.
		if err := CheckSharedLibrary(ncclLib); strings.Contains(ncclLib, "/") && err != nil {
			return BackendChoice{}, UsageErrorf("--nccl-lib %s: %v; give the path of libnccl.so.2", ncclLib, err)
		}
		switch name {
		case "cpu":
			return BackendChoice{}, UsageErrorf("--nccl-lib has no use with --backend cpu: leave one of them out")
		case "auto", "":
			b, err := f.OpenNCCL(ncclLib)
			if err != nil {
				return BackendChoice{}, &UsageError{Err: fmt.Errorf("--nccl-lib %s names NCCL, but the nccl backend is not available: %v", ncclLib, err)}
			}
			return BackendChoice{Backend: b, Reason: "auto; NCCL from --nccl-lib", Auto: true}, nil
		}
	}
	switch name {
	case "cpu":
		b, err := f.CPUBackend()
		if err != nil {
			return BackendChoice{}, err
		}
		return BackendChoice{Backend: b, Reason: "asked for with --backend cpu"}, nil
	case "nccl":
		b, err := f.OpenNCCL(ncclLib)
		if err != nil {
			return BackendChoice{}, &UsageError{Err: fmt.Errorf("the nccl backend is not available: %v", err)}
		}
		return BackendChoice{Backend: b, Reason: "asked for with --backend nccl"}, nil
	case mpib.Name:
		if ncclLib != "" {
			return BackendChoice{}, UsageErrorf("--nccl-lib has no use with --backend mpi: leave one of them out")
		}
		b, err := f.MPIBackend()
		if err != nil {
			return BackendChoice{}, err
		}
		return BackendChoice{Backend: b, Reason: "asked for with --backend mpi"}, nil
	case "auto", "":
		b, err := f.OpenNCCL(ncclLib)
		if err == nil {
			return BackendChoice{Backend: b, Reason: "auto; GPUs and NCCL found", Auto: true}, nil
		}
		cb, cerr := f.CPUBackend()
		if cerr != nil {
			return BackendChoice{}, cerr
		}
		return BackendChoice{Backend: cb, Reason: "auto; NCCL unavailable: " + err.Error(), Auto: true}, nil
	}
	return BackendChoice{}, UsageErrorf("unknown --backend %q (valid: auto, cpu, nccl, mpi)", name)
}

// CheckSharedLibrary says why path cannot be a shared library: missing, a
// directory, unreadable, or not an ELF file.
func CheckSharedLibrary(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("no such file")
		}
		return errors.Unwrap(err)
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.IsDir() {
		return errors.New("a directory, not a library")
	}
	var magic [4]byte
	if _, err := io.ReadFull(fh, magic[:]); err != nil || string(magic[:]) != "\x7fELF" {
		return errors.New("not a shared library (no ELF header)")
	}
	return nil
}

// OpenNCCL opens the NCCL backend from lib ("" searches), with the hangs,
// kills and stops $COLLBENCH_FAULTS plants in it (a testing option).
func (f *System) OpenNCCL(lib string) (measure.Backend, error) {
	if f.NCCL == nil {
		return nil, errors.New("this build has no NCCL backend")
	}
	fs, err := f.plantedFaults()
	if err != nil {
		return nil, err
	}
	b, err := f.NCCL(lib)
	if err != nil {
		return nil, err
	}
	if p, ok := b.(faultPlanter); ok && fs != nil {
		p.PlantFaults(fs)
	}
	if w, ok := b.(watched); ok {
		if s := f.watchSink(); s != nil {
			w.SetWatch(s, f.HostIdentity())
		}
	}
	return b, nil
}

// watched is a backend that sends collbench watch a summary of every
// operation it issues ($COLLBENCH_WATCH).
type watched interface {
	SetWatch(sink watch.Sink, host string)
}

// faultPlanter is a backend that takes planted faults after it is opened.
type faultPlanter interface {
	PlantFaults(fs *faults.Set)
}

// Environment captures where a run happens. NCCL's and CUDA's variables
// are recorded for the nccl backend only: they change nothing on the cpu.
func (f *System) Environment(b measure.Backend, reason string) results.Environment {
	return f.EnvironmentOf(b, reason, b.Name() != "cpu")
}

// EnvironmentOf captures where a run happens, with the variables that
// change how collectives behave when withVars.
func (f *System) EnvironmentOf(b measure.Backend, reason string, withVars bool) results.Environment {
	host, _ := f.Hostname()
	env := results.Environment{
		Host:      host,
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
		Backend:   b.Info(),
	}
	env.Backend.Reason = reason
	for _, kv := range f.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !RelevantEnv(k) || !withVars {
			continue
		}
		if env.Env == nil {
			env.Env = map[string]string{}
		}
		env.Env[k] = v
	}
	return env
}

// RelevantEnv selects the variables that change how collectives behave.
func RelevantEnv(k string) bool {
	if k == "NVIDIA_VISIBLE_DEVICES" || k == "COLLBENCH_NCCL_LIB" {
		return true
	}
	for _, p := range []string{"NCCL_", "CUDA_", "UCX_", "OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_mtl", "OMPI_MCA_coll", "OMPI_MCA_osc"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// LocalHosts returns the host of each of n ranks; in one process every rank is
// on this host.
func (f *System) LocalHosts(n int) []string {
	h, _ := f.Hostname()
	out := make([]string, n)
	for i := range out {
		out[i] = h
	}
	return out
}
