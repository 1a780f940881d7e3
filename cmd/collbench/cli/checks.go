package cli

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

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"collbench/backend/nccl/profiler"
	"collbench/bootstrap"
	"collbench/engine"
	"collbench/internal/faults"
	"collbench/internal/secret"
	"collbench/launch"
)

// The rules every flag and COLLBENCH_* variable follows, in one place:
// a value that does not parse is named with what is allowed, in words
// (never strconv's); a count given as 0 or below is refused unless its help
// says what 0 means; flags that cannot go together are refused together.

// minAnnotation marks a numeric flag with the least value it takes.
const minAnnotation = "collbench_min"

// atLeast sets the least value of the named flags: an integer, or for a
// duration flag a duration. A flag given below it is refused before the
// command runs; left out, the flag keeps its default.
func atLeast(fs *pflag.FlagSet, least string, names ...string) {
	for _, n := range names {
		if fs.Lookup(n) == nil {
			panic("atLeast: no flag " + n) // a programming error, caught by every test
		}
		_ = fs.SetAnnotation(n, minAnnotation, []string{least})
	}
}

// checkLeast refuses a given flag below its least value.
func checkLeast(cmd *cobra.Command, fl *pflag.Flag) error {
	least, ok := fl.Annotations[minAnnotation]
	if !ok || len(least) == 0 {
		return nil
	}
	see := fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	if fl.Value.Type() == "duration" {
		d, err := time.ParseDuration(fl.Value.String())
		lo, _ := time.ParseDuration(least[0])
		if err == nil && d < lo {
			if lo <= time.Nanosecond {
				return engine.UsageErrorf("invalid --%s %s: must be a positive duration such as 30s or 5m%s", fl.Name, fl.Value, see)
			}
			return engine.UsageErrorf("invalid --%s %s: must be at least %s%s", fl.Name, fl.Value, lo, see)
		}
		return nil
	}
	v, err := strconv.ParseInt(fl.Value.String(), 10, 64)
	lo, _ := strconv.ParseInt(least[0], 10, 64)
	if err == nil && v < lo {
		what := fmt.Sprintf("%d or more", lo)
		if lo == 1 {
			what = "1 or more; leave it out for its default"
		}
		return engine.UsageErrorf("invalid --%s %d: must be %s%s", fl.Name, v, what, see)
	}
	return nil
}

// flagParseRE matches pflag's message for a value that does not parse.
var flagParseRE = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: (.*)$`)

// flagError rewrites a flag parsing error in the user's words: the flag,
// the value given and what it takes, never strconv's or time's text.
func flagError(c *cobra.Command, err error) error {
	see := fmt.Sprintf(" (see '%s --help')", c.CommandPath())
	m := flagParseRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &engine.UsageError{Err: fmt.Errorf("%v%s", err, see)}
	}
	value, name, why := m[1], m[2], m[3]
	typ := ""
	if fl := c.Flags().Lookup(name); fl != nil {
		typ = fl.Value.Type()
	}
	want := "a value of the kind its help shows"
	switch typ {
	case "int", "int8", "int16", "int32", "int64":
		want = "a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		want = "a whole number, 0 or more"
	case "float32", "float64":
		want = "a number"
	case "duration":
		want = "a duration such as 500ms, 30s or 5m"
	case "bool":
		want = "true or false"
	}
	if strings.Contains(why, "out of range") {
		return engine.UsageErrorf("invalid --%s %q: too large (it takes %s)%s", name, value, want, see)
	}
	return engine.UsageErrorf("invalid --%s %q: it takes %s%s", name, value, want, see)
}

// groupErrRE matches Cobra's message for flags of a mutually exclusive group.
var groupErrRE = regexp.MustCompile(`if any flags in the group \[([^\]]*)\] are set none of the others can be; \[([^\]]*)\] were all set`)

// tidyCobra rewrites Cobra's own messages in collbench's words.
func tidyCobra(msg string) string {
	if m := groupErrRE.FindStringSubmatch(msg); m != nil {
		var given []string
		for _, n := range strings.Fields(m[2]) {
			given = append(given, "--"+n)
		}
		return fmt.Sprintf("%s cannot go together: give one of them", strings.Join(given, " and "))
	}
	return msg
}

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
	if err := engine.CheckSharedLibrary(v); err != nil {
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
	{secret.EnvToken, envAny},
	{secret.EnvTokenFile, envFile},
	{faults.EnvFaults, func(v string) error { _, err := faults.Parse(v); return err }},
	{engine.EnvProbe, envOneOf("on", "off", "always", "auto")},
	{profiler.EnvSwitch, envOneOf("on", "off")},
	{engine.EnvProbeTimeout, envDuration},
	{launch.EnvReports, envAny},
	{"COLLBENCH_BIN", envAny},           // the drills' binary
	{"COLLBENCH_DRILL_RUNS", envInt(1)}, // the drills' repeat count
}

// k8sServiceLinkRE matches the variables Kubernetes sets for a Service
// named collbench (COLLBENCH_SERVICE_HOST, COLLBENCH_PORT_29500_TCP...).
var k8sServiceLinkRE = regexp.MustCompile(`^COLLBENCH_(SERVICE_(HOST|PORT)\w*|PORT_\d+_\w+)$`)

// checkEnv validates every COLLBENCH_* variable set, and names one
// collbench does not know (a typo silently ignored is a run not as asked).
func checkEnv(environ []string) error {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "COLLBENCH_") || k8sServiceLinkRE.MatchString(name) {
			continue
		}
		i := slices.IndexFunc(envRules, func(r envRule) bool { return r.name == name })
		if i < 0 {
			return engine.UsageErrorf("unknown variable %s: collbench does not read it%s (unset it, or fix its name; docs/commands.md lists collbench's variables)", name, nearestEnv(name))
		}
		if value == "" {
			continue
		}
		if err := envRules[i].check(value); err != nil {
			return engine.UsageErrorf("invalid %s=%q: %s", name, value, strings.TrimPrefix(err.Error(), name+": "))
		}
	}
	return checkEnvPairs(environ)
}

// envPairs are variables whose first must be below their second: a rank
// inside its world, a local rank inside its host.
var envPairs = [][2]string{
	{bootstrap.EnvRank, bootstrap.EnvSize},
	{bootstrap.EnvLocalRank, bootstrap.EnvLocalSize},
	{"COLLBENCH_NODE_RANK", "COLLBENCH_NNODES"},
}

// checkEnvPairs refuses a rank that its size set beside it cannot hold.
func checkEnvPairs(environ []string) error {
	vals := map[string]int{}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(strings.TrimSpace(value)); err == nil && strings.HasPrefix(name, "COLLBENCH_") {
			vals[name] = n
		}
	}
	for _, p := range envPairs {
		r, okR := vals[p[0]]
		n, okN := vals[p[1]]
		if okR && okN && r >= n {
			return engine.UsageErrorf("invalid %s=%d: must be below %s=%d (ranks count from 0)", p[0], r, p[1], n)
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
