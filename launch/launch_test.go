package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanRefusesWhatCannotRun(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	none := env(nil)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no processes", Config{Procs: 0, Nodes: 1, Args: []string{"world"}, Getenv: none}, "invalid -n 0"},
		{"nodes do not divide", Config{Procs: 3, Nodes: 2, Args: []string{"world"}, Getenv: none}, "must divide the 3 processes"},
		{"no command", Config{Procs: 2, Nodes: 1, Getenv: none}, "needs a collbench command"},
		{"launch of launch", Config{Procs: 2, Nodes: 1, Args: []string{"launch"}, Getenv: none}, "cannot start launch"},
		{"bad command", Config{Procs: 2, Nodes: 1, Args: []string{"nope"}, Getenv: none,
			CheckArgs: func([]string) error { return errors.New(`"nope" is not a collbench command`) }}, "not a collbench command"},
		{"hosts without node rank", Config{Procs: 2, Nodes: 1, NNodes: 2, NodeRank: -1, RootAddr: "h:1", Args: []string{"world"}, Getenv: none}, "needs this host's --node-rank"},
		{"hosts without root", Config{Procs: 2, Nodes: 1, NNodes: 2, NodeRank: 1, Args: []string{"world"}, Getenv: none}, "needs --root-addr"},
		{"real and simulated hosts", Config{Procs: 2, Nodes: 2, NNodes: 2, NodeRank: 0, RootAddr: "h:1", Args: []string{"world"}, Getenv: none}, "leave --nodes out"},
	} {
		_, err := PlanOf(tc.cfg)
		var pe *PlanError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a plan error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestPlanEnvMakesOneWorld: across hosts, every process gets a distinct
// world rank, the same size and root, and its local rank on its host;
// the node rank and root come from the cluster's variables when the flags
// leave them out.
func TestPlanEnvMakesOneWorld(t *testing.T) {
	vars := map[string]string{"COLLBENCH_NNODES": "2", "SLURM_NODEID": "1", "COLLBENCH_ROOT_ADDR": "node0:29500"}
	p, err := PlanOf(Config{Procs: 4, Nodes: 1, NodeRank: -1, Args: []string{"world"}, Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if p.Procs() != 4 {
		t.Fatalf("procs %d", p.Procs())
	}
	for r := 0; r < 4; r++ {
		env := p.Env(r)
		for _, want := range []string{"COLLBENCH_RANK=" + string(rune('4'+r)), "COLLBENCH_WORLD_SIZE=8", "COLLBENCH_LOCAL_RANK=" + string(rune('0'+r)), "COLLBENCH_ROOT_ADDR=node0:29500"} {
			if !slices.Contains(env, want) {
				t.Errorf("process %d: %q missing from %q", r, want, env)
			}
		}
	}
}

// TestPlanSimulatedHosts: --nodes K on one host gives each simulated host
// its own NCCL_HOSTID and local ranks from 0.
func TestPlanSimulatedHosts(t *testing.T) {
	p, err := PlanOf(Config{Procs: 4, Nodes: 2, Args: []string{"world"}, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	p.host = "h"
	if e := p.Env(3); !slices.Contains(e, "COLLBENCH_LOCAL_RANK=1") || !slices.Contains(e, "NCCL_HOSTID=h-node1") {
		t.Errorf("process 3: %q", e)
	}
}

// TestRunRefusesAPortRankZeroCannotServe: --port of a port already taken
// is refused before any rank starts, naming the port and the cause, at
// once (the ranks waited out their 2-minute bootstrap before).
func TestRunRefusesAPortRankZeroCannotServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	start := time.Now()
	err = Run(context.Background(), Config{Procs: 2, Nodes: 1, Port: port, Args: []string{"world"}, Binary: "/nonexistent/collbench", Getenv: func(string) string { return "" }})
	var pe *PlanError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), fmt.Sprintf("--port %d: rank 0 cannot serve the rendezvous there", port)) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("got %v, want a plan error naming the port in use", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("refused after %v", took)
	}
}
