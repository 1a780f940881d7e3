package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"collbench/bootstrap"
	"collbench/internal/secret"
	"collbench/launch"
)

// The deploy examples are tested by playing the cluster: every pod or task
// gets the environment Kubernetes or Slurm would give it, its command runs
// through collbench's own flag parsing and launch plan, and the world every
// process detects must be one world: ranks 0..N-1 once each, one size, one
// rendezvous address that names pod 0.

func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var docs []map[string]any
	dec := yaml.NewDecoder(fh)
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
	return docs
}

// at walks a decoded YAML tree by keys and list indices.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("no map at %v", path)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("no list item at %v", path)
			}
			v = l[k]
		}
	}
	return v
}

// containerEnv resolves a container's env list for a pod with labels, as
// the kubelet would (values, Downward API labels, a secret).
func containerEnv(t *testing.T, c any, labels map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	list, _ := at(t, c, "env").([]any)
	for _, item := range list {
		name := at(t, item, "name").(string)
		m := item.(map[string]any)
		switch {
		case m["value"] != nil:
			env[name] = fmt.Sprint(m["value"])
		case m["valueFrom"] != nil:
			from := m["valueFrom"].(map[string]any)
			if fr, ok := from["fieldRef"].(map[string]any); ok {
				path := fr["fieldPath"].(string)
				re := regexp.MustCompile(`^metadata\.labels\['(.+)'\]$`)
				sm := re.FindStringSubmatch(path)
				if sm == nil {
					t.Fatalf("%s: unsupported fieldPath %q", name, path)
				}
				v, ok := labels[sm[1]]
				if !ok {
					t.Fatalf("%s: the pod has no label %s", name, sm[1])
				}
				env[name] = v
			} else if from["secretKeyRef"] != nil {
				env[name] = "secret-from-the-cluster"
			}
		}
	}
	return env
}

// playLaunch runs a container's `collbench launch` command in a pod with
// env, and returns the environment of each process it would start.
func playLaunch(t *testing.T, command []any, env map[string]string) [][]string {
	t.Helper()
	var args []string
	for _, a := range command {
		args = append(args, fmt.Sprint(a))
	}
	if len(args) < 2 || args[0] != "collbench" || args[1] != "launch" {
		t.Fatalf("the example does not run collbench launch: %q", args)
	}
	f, _, _ := testFactory()
	var plan launch.Plan
	cmd := NewCmdLaunch(f, func(o *LaunchOptions) error {
		o.Getenv = func(k string) string { return env[k] }
		var err error
		plan, err = o.plan()
		return err
	})
	cmd.SetArgs(args[2:])
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	if err := cmd.Execute(); err != nil {
		t.Fatalf("collbench %s: %v", strings.Join(args[1:], " "), err)
	}
	var out [][]string
	for r := 0; r < plan.Procs(); r++ {
		pe := []string{}
		for k, v := range env {
			pe = append(pe, k+"="+v)
		}
		out = append(out, append(pe, plan.Env(r)...))
	}
	return out
}

func envFunc(kv []string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v // later entries win, as in exec
	}
	return func(k string) string { return m[k] }
}

// oneWorld checks the launches every process detects form a single world.
func oneWorld(t *testing.T, procs [][]string, wantRoot string) {
	t.Helper()
	seen := map[int]bool{}
	for _, env := range procs {
		l, err := bootstrap.Detect(envFunc(env))
		if err != nil || l == nil {
			t.Fatalf("a process detects no world: %v", err)
		}
		if l.Size != len(procs) || l.RootAddr != wantRoot || seen[l.Rank] {
			t.Fatalf("process detects rank %d of %d at %s (want %d processes, root %s, each rank once)", l.Rank, l.Size, l.RootAddr, len(procs), wantRoot)
		}
		if envFunc(env)(secret.EnvToken) == "" {
			t.Errorf("rank %d has no job secret", l.Rank)
		}
		seen[l.Rank] = true
	}
	for r := range procs {
		if !seen[r] {
			t.Fatalf("no process is rank %d", r)
		}
	}
}

func deployPath(parts ...string) string {
	return filepath.Join(append([]string{"..", "..", "..", "deploy"}, parts...)...)
}

func TestDeployKubernetesIndexedJob(t *testing.T) {
	docs := yamlDocs(t, deployPath("kubernetes", "indexed-job.yaml"))
	var job map[string]any
	for _, d := range docs {
		if d["kind"] == "Job" {
			job = d
		}
	}
	if job == nil {
		t.Fatal("no Job in the manifest")
	}
	name := at(t, job, "metadata", "name").(string)
	pods := at(t, job, "spec", "completions").(int)
	if at(t, job, "spec", "completionMode") != "Indexed" {
		t.Fatal("the Job is not Indexed")
	}
	podSpec := at(t, job, "spec", "template", "spec")
	sub := at(t, podSpec, "subdomain").(string)
	c := at(t, podSpec, "containers", 0)
	var all [][]string
	for i := 0; i < pods; i++ {
		labels := map[string]string{"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/job-completion-index": strconv.Itoa(i)}
		env := containerEnv(t, c, labels)
		env[bootstrap.EnvK8sIndex] = strconv.Itoa(i) // set by the Job controller
		all = append(all, playLaunch(t, at(t, c, "command").([]any), env)...)
	}
	oneWorld(t, all, fmt.Sprintf("%s-0.%s:29500", name, sub))
	if len(all) != 16 {
		t.Errorf("want 2 pods of 8 processes, got %d processes", len(all))
	}
}

func TestDeployKubernetesJobSet(t *testing.T) {
	docs := yamlDocs(t, deployPath("kubernetes", "jobset.yaml"))
	js := docs[0]
	if js["kind"] != "JobSet" {
		t.Fatalf("kind %v", js["kind"])
	}
	name := at(t, js, "metadata", "name").(string)
	rj := at(t, js, "spec", "replicatedJobs", 0)
	rjName := at(t, rj, "name").(string)
	jobs := at(t, rj, "replicas").(int)
	pods := at(t, rj, "template", "spec", "completions").(int)
	c := at(t, rj, "template", "spec", "template", "spec", "containers", 0)
	var all [][]string
	for j := 0; j < jobs; j++ {
		for p := 0; p < pods; p++ {
			labels := map[string]string{"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rjName,
				"jobset.sigs.k8s.io/job-index": strconv.Itoa(j)}
			env := containerEnv(t, c, labels)
			env[bootstrap.EnvK8sIndex] = strconv.Itoa(p)
			all = append(all, playLaunch(t, at(t, c, "command").([]any), env)...)
		}
	}
	// JobSet names pod p of job j <jobset>-<replicated job>-j-p.<jobset>.
	oneWorld(t, all, fmt.Sprintf("%s-%s-0-0.%s:29500", name, rjName, name))
}

// TestDeployOneProcessPerPod detects a world of one process per pod from
// the documented variables alone.
func TestDeployOneProcessPerPod(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"JOB_COMPLETION_INDEX": "3", "COLLBENCH_WORLD_SIZE": "4", "JOB_NAME": "cb", "COLLBENCH_SERVICE": "svc"}, "cb-0.svc:29500"},
		{map[string]string{"JOB_INDEX": "1", "JOB_COMPLETION_INDEX": "1", "COLLBENCH_PODS_PER_JOB": "2", "COLLBENCH_WORLD_SIZE": "4",
			"JOBSET_NAME": "js", "REPLICATED_JOB_NAME": "w", "COLLBENCH_PORT": "31000"}, "js-w-0-0.js:31000"},
	} {
		l, err := bootstrap.Detect(func(k string) string { return c.env[k] })
		if err != nil || l == nil || l.Rank != 3 || l.Size != 4 || l.RootAddr != c.want || !strings.HasPrefix(l.Source, "kubernetes") {
			t.Errorf("%v: %+v %v", c.env, l, err)
		}
	}
}

func TestDeploySlurmBatchScript(t *testing.T) {
	path := deployPath("slurm", "collbench.sbatch")
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	opts := map[string]string{}
	var sruns []string
	exportsToken := false
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "#SBATCH --"); ok {
			k, val, _ := strings.Cut(v, "=")
			opts[k] = val
		}
		if strings.HasPrefix(line, "srun ") {
			sruns = append(sruns, line)
		}
		exportsToken = exportsToken || line == "export "+secret.EnvToken
	}
	nodes, _ := strconv.Atoi(opts["nodes"])
	perNode, _ := strconv.Atoi(opts["ntasks-per-node"])
	if nodes < 2 || perNode < 1 || len(sruns) == 0 || !exportsToken {
		t.Fatalf("nodes %d, tasks per node %d, srun lines %d, token exported %v", nodes, perNode, len(sruns), exportsToken)
	}
	for _, s := range sruns {
		if !strings.Contains(s, " collbench ") {
			t.Errorf("srun line does not run collbench: %q", s)
		}
	}
	var procs [][]string
	for task := 0; task < nodes*perNode; task++ {
		procs = append(procs, []string{"SLURM_PROCID=" + strconv.Itoa(task), "SLURM_NTASKS=" + strconv.Itoa(nodes*perNode),
			"SLURM_LOCALID=" + strconv.Itoa(task%perNode), "SLURM_JOB_NODELIST=gpu[07-08]", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=1",
			secret.EnvToken + "=from-the-script"})
	}
	l, _ := bootstrap.Detect(envFunc(procs[0]))
	if l == nil || !strings.HasPrefix(l.RootAddr, "gpu07:") {
		t.Fatalf("rank 0 should serve on the first node: %+v", l)
	}
	oneWorld(t, procs, l.RootAddr)
}
