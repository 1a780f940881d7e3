package bootstrap

import (
	"reflect"
	"strings"
	"testing"
)

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestDetectLaunchers(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Launch
	}{
		{"collbench launch", map[string]string{EnvRank: "2", EnvSize: "4", EnvLocalRank: "0", EnvLocalSize: "2", EnvRootAddr: "127.0.0.1:4000"},
			Launch{Source: "collbench launch", Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, RootAddr: "127.0.0.1:4000"}},
		{"torchrun", map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500"},
			Launch{Source: "torchrun", Rank: 3, Size: 8, LocalRank: 3, LocalSize: 4, RootAddr: "10.1.2.3:29500"}},
		{"slurm", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "gpu[07-10]", "COLLBENCH_PORT": "31000"},
			Launch{Source: "slurm", Rank: 5, Size: 16, LocalRank: 1, LocalSize: -1, RootAddr: "gpu07:31000"}},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			Launch{Source: "open mpi", Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4}},
		{"mpich", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
			Launch{Source: "mpich/pmi", Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2}},
		{"pmix", map[string]string{"PMIX_RANK": "1", "PMIX_SIZE": "2"},
			Launch{Source: "mpich/pmi", Rank: 1, Size: 2, LocalSize: -1}},
		{"mpi with explicit address", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", EnvRootAddr: "h:1"},
			Launch{Source: "open mpi", Rank: 0, Size: 2, LocalSize: -1, RootAddr: "h:1"}},
	}
	for _, c := range cases {
		l, err := Detect(envOf(c.env))
		if err != nil || l == nil {
			t.Errorf("%s: %v, %v", c.name, l, err)
			continue
		}
		l.Evidence = nil
		if !reflect.DeepEqual(*l, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, *l, c.want)
		}
	}
}

func TestDetectSingleAndBad(t *testing.T) {
	if l, err := Detect(envOf(nil)); l != nil || err != nil {
		t.Errorf("empty environment: %v %v", l, err)
	}
	if l, err := Detect(envOf(map[string]string{"RANK": "0", "WORLD_SIZE": "1"})); l != nil || err != nil {
		t.Errorf("a world of one is a single process: %v %v", l, err)
	}
	for _, env := range []map[string]string{
		{"SLURM_PROCID": "4", "SLURM_NTASKS": "4"},
		{"RANK": "x", "WORLD_SIZE": "2"},
		{"OMPI_COMM_WORLD_RANK": "-1", "OMPI_COMM_WORLD_SIZE": "2"},
	} {
		if _, err := Detect(envOf(env)); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}

func TestSlurmPortDerivedPerStep(t *testing.T) {
	a := slurmPort(envOf(map[string]string{"SLURM_JOB_ID": "100", "SLURM_STEP_ID": "0"}))
	b := slurmPort(envOf(map[string]string{"SLURM_JOB_ID": "100", "SLURM_STEP_ID": "1"}))
	if a == b || a < 20000 || a >= 40000 {
		t.Errorf("ports %d %d", a, b)
	}
}

func TestFirstHost(t *testing.T) {
	cases := map[string]string{
		"node01":              "node01",
		"node[01-04,07],gpu5": "node01",
		"gpu5,node[1-2]":      "gpu5",
		"rack1-n[003-010]":    "rack1-n003",
		"a[7,9]b":             "a7b",
		" dgx-[12-13]":        "dgx-12",
		"x[2]":                "x2",
	}
	for in, want := range cases {
		got, err := FirstHost(in)
		if err != nil || got != want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "node[01-04", "node[]"} {
		if _, err := FirstHost(bad); err == nil || !strings.Contains(err.Error(), "Slurm node list") {
			t.Errorf("FirstHost(%q) = %v", bad, err)
		}
	}
}
