package cli

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"collbench/backend/cpu"
	"collbench/internal/faults"
	"collbench/results"
	"collbench/suites"
)

// Factory holds what commands need from the outside world, so tests can
// replace any of it.
type Factory struct {
	IO *IOStreams
	// Args is the command line as typed, for result headers.
	Args     []string
	Hostname func() (string, error)
	Now      func() time.Time
	Environ  func() []string
	// CPUOptions configure the CPU backend (tests set a corruption hook).
	CPUOptions cpu.Options
	// NCCL opens the NCCL backend from the given library path ("" = search);
	// nil when this build has none.
	NCCL func(lib string) (suites.Backend, error)
	// NVML returns the NVML library to ask about GPUs (a mock in tests).
	NVML func() nvml.Interface
	// HardExit lets a run that does not stop within a grace period after a
	// fault end the process (set by Main; never in tests, which run in the
	// test binary's process).
	HardExit bool
}

// NewFactory returns a Factory wired to the real system.
func NewFactory(io *IOStreams) *Factory {
	return &Factory{
		IO:       io,
		Hostname: os.Hostname,
		Now:      time.Now,
		Environ:  os.Environ,
		NCCL:     openNCCL,
		NVML:     func() nvml.Interface { return nvml.New() },
	}
}

// BackendChoice is the backend a command will use and why.
type BackendChoice struct {
	Backend suites.Backend
	Reason  string
	Auto    bool
}

// cpuBackend returns the CPU backend with the faults $COLLBENCH_FAULTS
// plants (a testing option), unless the factory already has some.
func (f *Factory) cpuBackend() (*cpu.Backend, error) {
	opts := f.CPUOptions
	if opts.Faults == nil {
		fs, err := faults.Parse(f.getenv(faults.EnvFaults))
		if err != nil {
			return nil, &UsageError{err}
		}
		opts.Faults = fs
	}
	return cpu.New(opts), nil
}

// ChooseBackend resolves --backend auto|cpu|nccl without printing anything.
func (f *Factory) ChooseBackend(name, ncclLib string) (BackendChoice, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if ncclLib != "" {
		// A library named by hand is checked before anything else, and
		// means NCCL is wanted: auto does not fall back to the cpu.
		// A bare name (libnccl.so.2) is the dynamic linker's to find;
		// a path must be a library.
		if err := checkSharedLibrary(ncclLib); strings.Contains(ncclLib, "/") && err != nil {
			return BackendChoice{}, usageErrorf("--nccl-lib %s: %v; give the path of libnccl.so.2", ncclLib, err)
		}
		switch name {
		case "cpu":
			return BackendChoice{}, usageErrorf("--nccl-lib has no use with --backend cpu: leave one of them out")
		case "auto", "":
			b, err := f.openNCCL(ncclLib)
			if err != nil {
				return BackendChoice{}, &UsageError{fmt.Errorf("--nccl-lib %s names NCCL, but the nccl backend is not available: %v", ncclLib, err)}
			}
			return BackendChoice{Backend: b, Reason: "auto; NCCL from --nccl-lib", Auto: true}, nil
		}
	}
	switch name {
	case "cpu":
		b, err := f.cpuBackend()
		if err != nil {
			return BackendChoice{}, err
		}
		return BackendChoice{Backend: b, Reason: "asked for with --backend cpu"}, nil
	case "nccl":
		b, err := f.openNCCL(ncclLib)
		if err != nil {
			return BackendChoice{}, &UsageError{fmt.Errorf("the nccl backend is not available: %v", err)}
		}
		return BackendChoice{Backend: b, Reason: "asked for with --backend nccl"}, nil
	case "auto", "":
		b, err := f.openNCCL(ncclLib)
		if err == nil {
			return BackendChoice{Backend: b, Reason: "auto; GPUs and NCCL found", Auto: true}, nil
		}
		cb, cerr := f.cpuBackend()
		if cerr != nil {
			return BackendChoice{}, cerr
		}
		return BackendChoice{Backend: cb, Reason: "auto; NCCL unavailable: " + err.Error(), Auto: true}, nil
	}
	return BackendChoice{}, usageErrorf("unknown --backend %q (valid: auto, cpu, nccl)", name)
}

// checkSharedLibrary says why path cannot be a shared library: missing, a
// directory, unreadable, or not an ELF file.
func checkSharedLibrary(path string) error {
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

func (f *Factory) openNCCL(lib string) (suites.Backend, error) {
	if f.NCCL == nil {
		return nil, errors.New("this build has no NCCL backend")
	}
	return f.NCCL(lib)
}

// environment captures where a run happens. NCCL's and CUDA's variables
// are recorded for the nccl backend only: they change nothing on the cpu.
func (f *Factory) environment(b suites.Backend, reason string) results.Environment {
	return f.environmentOf(b, reason, b.Name() != "cpu")
}

// environmentOf captures where a run happens, with the variables that
// change how collectives behave when withVars.
func (f *Factory) environmentOf(b suites.Backend, reason string, withVars bool) results.Environment {
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
		if !ok || !relevantEnv(k) || !withVars {
			continue
		}
		if env.Env == nil {
			env.Env = map[string]string{}
		}
		env.Env[k] = v
	}
	return env
}

// relevantEnv selects the variables that change how collectives behave.
func relevantEnv(k string) bool {
	if k == "NVIDIA_VISIBLE_DEVICES" || k == "COLLBENCH_NCCL_LIB" {
		return true
	}
	for _, p := range []string{"NCCL_", "CUDA_", "UCX_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func sortedStrings(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// hosts returns the host of each of n ranks; in one process every rank is
// on this host.
func (f *Factory) hosts(n int) []string {
	h, _ := f.Hostname()
	out := make([]string, n)
	for i := range out {
		out[i] = h
	}
	return out
}
