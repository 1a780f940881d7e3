package engine

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"collbench/backend/nccl"
	"collbench/bootstrap"
	"collbench/internal/faults"
	"collbench/watch"
)

// envRule checks one COLLBENCH_* variable's value; "" is left to the
// reader (unset).
type envRule struct {
	name  string
	check func(string) error
}

func envInt(least int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("is not a whole number")
		}
		if n < least {
			return fmt.Errorf("must be %d or more", least)
		}
		return nil
	}
}

func envOneOf(allowed ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(allowed, strings.ToLower(strings.TrimSpace(v))) {
			return fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
		}
		return nil
	}
}

func envAny(string) error { return nil }

// envPort takes a port number. A Kubernetes Service named collbench puts
// its own COLLBENCH_PORT=tcp://ADDR:PORT into every pod (service links);
// that is not the user's and is ignored, as the rendezvous does.
func envPort(v string) error {
	if strings.Contains(v, "://") {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("must be a port between 1 and 65535")
	}
	return nil
}

func envHostPort(v string) error {
	host, port, err := net.SplitHostPort(strings.TrimSpace(v))
	if err != nil || port == "" {
		return fmt.Errorf("must be host:port, e.g. node0:29500")
	}
	if host == "" {
		return fmt.Errorf("names no host: give the root's host name or address, e.g. node0:%s", port)
	}
	return envPort(port)
}

// envFile takes a file that must exist and be readable now, as a secret
// or a library the run will read later: a wrong path is named before any
// process waits on it.
// envDir checks a directory collbench writes into: launch's reports, left
// there for the launcher to read (a path that is none lost them silently).
func envDir(v string) error {
	st, err := os.Stat(v)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("no such directory (collbench launch sets it for the ranks it starts; unset it)")
	case err != nil:
		return fmt.Errorf("cannot be read: %v", errors.Unwrap(err))
	case !st.IsDir():
		return fmt.Errorf("is not a directory")
	}
	return nil
}

func envFile(v string) error {
	fh, err := os.Open(v)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("no such file")
		case errors.Is(err, os.ErrPermission):
			return fmt.Errorf("cannot be read (permission denied)")
		}
		return fmt.Errorf("cannot be opened: %v", errors.Unwrap(err))
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("is not a regular file")
	}
	return nil
}

// envLibrary takes a library path, or a bare name the dynamic linker
// searches for (libnccl.so.2), as --nccl-lib does.
func envLibrary(v string) error {
	if !strings.Contains(v, "/") {
		return nil
	}
	if err := CheckSharedLibrary(v); err != nil {
		return err
	}
	return nil
}

func envDuration(v string) error {
	if d, err := time.ParseDuration(strings.TrimSpace(v)); err != nil || d <= 0 {
		return fmt.Errorf("must be a positive duration such as 30s or 5m")
	}
	return nil
}

// envRules are every COLLBENCH_* variable collbench reads, each checked
// like its flag.
var envRules = []envRule{
	{bootstrap.EnvRank, envInt(0)},
	{bootstrap.EnvSize, envInt(1)},
	{bootstrap.EnvLocalRank, envInt(0)},
	{bootstrap.EnvLocalSize, envInt(1)},
	{bootstrap.EnvPort, envPort},
	{bootstrap.EnvRootAddr, envHostPort},
	{bootstrap.EnvDevice, envInt(0)},
	{bootstrap.EnvHost, envAny},
	{bootstrap.EnvK8sService, envAny},
	{bootstrap.EnvPodsPerJob, envInt(1)},
	{bootstrap.EnvFanout, func(v string) error {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("must be a whole number from 1 to 1024")
		}
		return nil
	}},
	{"COLLBENCH_NNODES", envInt(1)},
	{"COLLBENCH_NODE_RANK", envInt(0)},
	{"COLLBENCH_NCCL_LIB", envLibrary},
	{bootstrap.EnvToken, envAny},
	{bootstrap.EnvTokenFile, envFile},
	{faults.EnvFaults, func(v string) error { _, err := faults.Parse(v); return err }},
	{EnvProbe, envOneOf("on", "off", "always", "auto")},
	{nccl.EnvProfiler, envOneOf("on", "off")},
	{EnvProbeTimeout, envDuration},
	{bootstrap.EnvReports, envDir},
	{watch.EnvAddr, envHostPort},
	{watch.EnvEvery, func(v string) error {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n < 1 || n > 1_000_000 {
			return fmt.Errorf("must be a whole number from 1 to 1000000 (send every Nth operation)")
		}
		return nil
	}},
	{"COLLBENCH_BIN", envAny},           // the drills' binary
	{"COLLBENCH_DRILL_RUNS", envInt(1)}, // the drills' repeat count
}

// k8sServiceLinkRE matches the variables Kubernetes sets for a Service
// named collbench (COLLBENCH_SERVICE_HOST, COLLBENCH_PORT_29500_TCP...).
var k8sServiceLinkRE = regexp.MustCompile(`^COLLBENCH_(SERVICE_(HOST|PORT)\w*|PORT_\d+_\w+)$`)

// CheckEnv validates every COLLBENCH_* variable set, and names one
// collbench does not know (a typo silently ignored is a run not as asked).
func CheckEnv(environ []string) error {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "COLLBENCH_") || k8sServiceLinkRE.MatchString(name) {
			continue
		}
		i := slices.IndexFunc(envRules, func(r envRule) bool { return r.name == name })
		if i < 0 {
			return UsageErrorf("unknown variable %s: collbench does not read it%s (unset it, or fix its name; docs/commands.md lists collbench's variables)", name, nearestEnv(name))
		}
		if value == "" {
			continue
		}
		if err := envRules[i].check(value); err != nil {
			return UsageErrorf("invalid %s=%q: %s", name, value, strings.TrimPrefix(err.Error(), name+": "))
		}
	}
	return checkEnvPairs(environ)
}

// envPairs are variables whose first must be below their second: a rank
// inside its world, a local rank inside its host; collbench's own and the
// launchers' it reads (torchrun, Open MPI, Slurm). COLLBENCH_RANK
// without COLLBENCH_WORLD_SIZE is refused too.
var envPairs = [][2]string{
	{bootstrap.EnvRank, bootstrap.EnvSize},
	{bootstrap.EnvLocalRank, bootstrap.EnvLocalSize},
	{"COLLBENCH_NODE_RANK", "COLLBENCH_NNODES"},
	{"RANK", "WORLD_SIZE"},
	{"LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
	{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"SLURM_PROCID", "SLURM_NTASKS"},
}

// checkEnvPairs refuses a rank that its size set beside it cannot hold,
// and COLLBENCH_RANK set without its world's size.
func checkEnvPairs(environ []string) error {
	vals := map[string]int{}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(strings.TrimSpace(value)); err == nil {
			vals[name] = n
		}
	}
	for _, p := range envPairs {
		r, okR := vals[p[0]]
		n, okN := vals[p[1]]
		if okR && okN && r >= n {
			return UsageErrorf("invalid %s=%d: must be below %s=%d (ranks count from 0)", p[0], r, p[1], n)
		}
		if okR && !okN && p[0] == bootstrap.EnvRank {
			return UsageErrorf("%s=%d without %s: set both, or neither for one process", p[0], r, p[1])
		}
	}
	return nil
}

// nearestEnv suggests the known variable closest to a mistyped name.
func nearestEnv(name string) string {
	best, bestD := "", 4 // more than 3 edits apart is no suggestion
	for _, r := range envRules {
		if d := editDistance(name, r.name); d < bestD {
			best, bestD = r.name, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
