// Package bootstrap forms a world of collbench processes: it reads what a
// launcher (collbench launch, torchrun, Slurm, Open MPI, MPICH/PMI) says
// about this process, then joins the others over a small TCP rendezvous
// served by rank 0, or over MPI in builds with the mpi tag. The resulting
// Control carries the NCCL unique id and the runner's small messages.
package bootstrap

import (
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
)

// Environment variables collbench's own launcher sets.
const (
	EnvRank      = "COLLBENCH_RANK"
	EnvSize      = "COLLBENCH_WORLD_SIZE"
	EnvLocalRank = "COLLBENCH_LOCAL_RANK"
	EnvLocalSize = "COLLBENCH_LOCAL_SIZE"
	EnvRootAddr  = "COLLBENCH_ROOT_ADDR"
	EnvPort      = "COLLBENCH_PORT"
	EnvHost      = "COLLBENCH_HOST"
	// EnvFanout sets how many children each process of the bootstrap tree
	// serves (default 32); rank 0's value holds for the job.
	EnvFanout = "COLLBENCH_BOOTSTRAP_FANOUT"
	// EnvDevice names the GPU a launched process drives (the launcher's
	// global rank, so simulated nodes on one host use different GPUs).
	EnvDevice = "COLLBENCH_DEVICE"
	// EnvReports names the directory where ranks started by collbench
	// launch leave the fault that stopped them, so the launcher can name it.
	EnvReports = "COLLBENCH_LAUNCH_REPORTS"

	// Kubernetes: the Job controller sets JOB_COMPLETION_INDEX in the pods
	// of an Indexed Job; the manifest sets the rest (JobSet's indices come
	// from its pod labels through the Downward API).
	EnvK8sIndex       = "JOB_COMPLETION_INDEX"
	EnvK8sJobName     = "JOB_NAME"               // label batch.kubernetes.io/job-name
	EnvK8sService     = "COLLBENCH_SERVICE"      // the headless Service the pods are a subdomain of
	EnvJobSetName     = "JOBSET_NAME"            // label jobset.sigs.k8s.io/jobset-name
	EnvJobSetRJob     = "REPLICATED_JOB_NAME"    // label jobset.sigs.k8s.io/replicatedjob-name
	EnvJobSetJobIndex = "JOB_INDEX"              // label jobset.sigs.k8s.io/job-index
	EnvPodsPerJob     = "COLLBENCH_PODS_PER_JOB" // pods of each Job of the JobSet (its parallelism)
	// DefaultPort is the rendezvous port when nothing names one.
	DefaultPort = 29500
)

// Launch is what the environment says about this process.
type Launch struct {
	// Source names the launcher: "collbench launch", "torchrun", "slurm",
	// "open mpi" or "mpich/pmi".
	Source    string
	Rank      int
	Size      int
	LocalRank int
	LocalSize int // -1 when the launcher does not say
	// RootAddr is rank 0's rendezvous address (host:port), "" when the
	// environment gives none (MPI launchers).
	RootAddr string
	// Evidence lists the variables that identified the launcher.
	Evidence []string
}

// MultiProcess reports whether the launch describes more than one process.
func (l *Launch) MultiProcess() bool { return l != nil && l.Size > 1 }

type intVar struct {
	name string
	dst  *int
}

func readInts(getenv func(string) string, vars ...intVar) ([]string, bool, error) {
	var ev []string
	for _, v := range vars {
		s := getenv(v.name)
		if s == "" {
			return nil, false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return nil, true, fmt.Errorf("%s=%q is not a non-negative integer", v.name, s)
		}
		*v.dst = n
		ev = append(ev, v.name+"="+s)
	}
	return ev, true, nil
}

func optInt(getenv func(string) string, name string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(getenv(name))); err == nil && n >= 0 {
		return n
	}
	return def
}

// Detect reads the launcher's variables. It returns nil when nothing says
// this process is one of several. The first launcher found wins, in this
// order: collbench launch, torchrun, Slurm, a Kubernetes JobSet, a
// Kubernetes Indexed Job, Open MPI, MPICH/PMI.
func Detect(getenv func(string) string) (*Launch, error) {
	type detector struct {
		source string
		read   func(*Launch) ([]string, bool, error)
	}
	ds := []detector{
		{"collbench launch", func(l *Launch) ([]string, bool, error) {
			ev, ok, err := readInts(getenv, intVar{EnvRank, &l.Rank}, intVar{EnvSize, &l.Size})
			if ok && err == nil {
				l.LocalRank = optInt(getenv, EnvLocalRank, 0)
				l.LocalSize = optInt(getenv, EnvLocalSize, -1)
				l.RootAddr = getenv(EnvRootAddr)
			}
			return ev, ok, err
		}},
		{"torchrun", func(l *Launch) ([]string, bool, error) {
			ev, ok, err := readInts(getenv, intVar{"RANK", &l.Rank}, intVar{"WORLD_SIZE", &l.Size})
			if ok && err == nil {
				l.LocalRank = optInt(getenv, "LOCAL_RANK", 0)
				l.LocalSize = optInt(getenv, "LOCAL_WORLD_SIZE", -1)
				if a, p := getenv("MASTER_ADDR"), getenv("MASTER_PORT"); a != "" && p != "" {
					l.RootAddr = joinHostPort(a, p)
				}
			}
			return ev, ok, err
		}},
		{"slurm", func(l *Launch) ([]string, bool, error) {
			ev, ok, err := readInts(getenv, intVar{"SLURM_PROCID", &l.Rank}, intVar{"SLURM_NTASKS", &l.Size})
			if ok && err == nil {
				l.LocalRank = optInt(getenv, "SLURM_LOCALID", 0)
				l.LocalSize = -1
				if nodes := firstNonEmpty(getenv("SLURM_STEP_NODELIST"), getenv("SLURM_JOB_NODELIST")); nodes != "" {
					host, herr := FirstHost(nodes)
					if herr != nil {
						return ev, true, herr
					}
					l.RootAddr = joinHostPort(host, strconv.Itoa(slurmPort(getenv)))
				}
			}
			return ev, ok, err
		}},
		{"kubernetes jobset", func(l *Launch) ([]string, bool, error) {
			var job, pod, perJob int
			ev, ok, err := readInts(getenv, intVar{EnvJobSetJobIndex, &job}, intVar{EnvK8sIndex, &pod},
				intVar{EnvPodsPerJob, &perJob}, intVar{EnvSize, &l.Size})
			if ok && err == nil {
				if pod >= perJob {
					return ev, true, fmt.Errorf("%s=%d does not fit %s=%d", EnvK8sIndex, pod, EnvPodsPerJob, perJob)
				}
				l.Rank, l.LocalRank, l.LocalSize = job*perJob+pod, 0, 1
				if js, rj := getenv(EnvJobSetName), getenv(EnvJobSetRJob); js != "" && rj != "" {
					// Pod 0 of job 0: <jobset>-<replicated job>-0-0.<subdomain>.
					l.RootAddr = joinHostPort(fmt.Sprintf("%s-%s-0-0.%s", js, rj, firstNonEmpty(getenv(EnvK8sService), js)), portOf(getenv))
				}
			}
			return ev, ok, err
		}},
		{"kubernetes indexed job", func(l *Launch) ([]string, bool, error) {
			ev, ok, err := readInts(getenv, intVar{EnvK8sIndex, &l.Rank}, intVar{EnvSize, &l.Size})
			if ok && err == nil {
				l.LocalRank, l.LocalSize = 0, 1
				if job, svc := getenv(EnvK8sJobName), getenv(EnvK8sService); job != "" && svc != "" {
					// Pod 0 of an Indexed Job with a subdomain: <job>-0.<service>.
					l.RootAddr = joinHostPort(job+"-0."+svc, portOf(getenv))
				}
			}
			return ev, ok, err
		}},
		{"open mpi", func(l *Launch) ([]string, bool, error) {
			ev, ok, err := readInts(getenv, intVar{"OMPI_COMM_WORLD_RANK", &l.Rank}, intVar{"OMPI_COMM_WORLD_SIZE", &l.Size})
			if ok && err == nil {
				l.LocalRank = optInt(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", 0)
				l.LocalSize = optInt(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE", -1)
			}
			return ev, ok, err
		}},
		{"mpich/pmi", func(l *Launch) ([]string, bool, error) {
			ev, ok, err := readInts(getenv, intVar{"PMI_RANK", &l.Rank}, intVar{"PMI_SIZE", &l.Size})
			if !ok {
				ev, ok, err = readInts(getenv, intVar{"PMIX_RANK", &l.Rank}, intVar{"PMIX_SIZE", &l.Size})
			}
			if ok && err == nil {
				l.LocalRank = optInt(getenv, "MPI_LOCALRANKID", 0)
				l.LocalSize = optInt(getenv, "MPI_LOCALNRANKS", -1)
			}
			return ev, ok, err
		}},
	}
	for _, d := range ds {
		l := &Launch{Source: d.source, LocalSize: -1}
		ev, ok, err := d.read(l)
		if !ok {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("launched by %s: %w", d.source, err)
		}
		l.Evidence = ev
		if l.Size < 1 || l.Rank >= l.Size {
			return nil, fmt.Errorf("launched by %s: rank %d does not fit a world of %d (%s)", d.source, l.Rank, l.Size, strings.Join(ev, " "))
		}
		if addr := getenv(EnvRootAddr); addr != "" {
			l.RootAddr = addr // an explicit address wins for every launcher
		}
		// A port that is not a number fails now, not after the rendezvous
		// timeout.
		for _, k := range []string{"MASTER_PORT", EnvPort} {
			if v := getenv(k); v != "" {
				if p, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || p < 1 || p > 65535 {
					return nil, fmt.Errorf("launched by %s: %s=%s is not a port number: use 1-65535", d.source, k, v)
				}
			}
		}
		if l.RootAddr != "" {
			if _, port, err := net.SplitHostPort(l.RootAddr); err != nil {
				return nil, fmt.Errorf("launched by %s: rendezvous address %q is not host:port (%s)", d.source, l.RootAddr, strings.Join(ev, " "))
			} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
				return nil, fmt.Errorf("launched by %s: rendezvous address %q has no valid port: use 1-65535", d.source, l.RootAddr)
			}
		}
		if l.Size == 1 {
			return nil, nil
		}
		return l, nil
	}
	return nil, nil
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// portOf is $COLLBENCH_PORT or the default rendezvous port.
func portOf(getenv func(string) string) string {
	if p := optInt(getenv, EnvPort, 0); p > 0 && p < 65536 {
		return strconv.Itoa(p)
	}
	return strconv.Itoa(DefaultPort)
}

// slurmPort picks the rendezvous port of a Slurm step: $COLLBENCH_PORT, or a
// port derived from the job and step ids so concurrent steps differ.
func slurmPort(getenv func(string) string) int {
	if p := optInt(getenv, EnvPort, 0); p > 0 && p < 65536 {
		return p
	}
	h := fnv.New32a()
	h.Write([]byte(getenv("SLURM_JOB_ID") + "." + getenv("SLURM_STEP_ID")))
	return 20000 + int(h.Sum32()%20000)
}

// FirstHost returns the first host of a Slurm host list such as
// "node[01-04,07],gpu5" (here "node01").
func FirstHost(list string) (string, error) {
	s := strings.TrimSpace(list)
	depth := 0
	end := len(s)
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				end = i
			}
		}
		if end != len(s) {
			break
		}
	}
	first := s[:end]
	open := strings.IndexByte(first, '[')
	if open < 0 {
		if first == "" {
			return "", fmt.Errorf("empty Slurm node list %q", list)
		}
		return first, nil
	}
	closeIdx := strings.IndexByte(first[open:], ']')
	if closeIdx < 0 {
		return "", fmt.Errorf("malformed Slurm node list %q", list)
	}
	inner := first[open+1 : open+closeIdx]
	item, _, _ := strings.Cut(inner, ",")
	lo, _, _ := strings.Cut(item, "-")
	if lo == "" {
		return "", fmt.Errorf("malformed Slurm node list %q", list)
	}
	return first[:open] + lo + first[open+closeIdx+1:], nil
}

// PodIndex returns this pod's index among the pods of a Kubernetes Indexed
// Job (JOB_COMPLETION_INDEX), or of a JobSet (JOB_INDEX × pods per job +
// JOB_COMPLETION_INDEX), and whether the environment says.
func PodIndex(getenv func(string) string) (int, bool) {
	var job, pod, perJob int
	if _, ok, err := readInts(getenv, intVar{EnvJobSetJobIndex, &job}, intVar{EnvK8sIndex, &pod}, intVar{EnvPodsPerJob, &perJob}); ok && err == nil {
		return job*perJob + pod, true
	}
	if _, ok, err := readInts(getenv, intVar{EnvK8sIndex, &pod}); ok && err == nil {
		return pod, true
	}
	return 0, false
}
