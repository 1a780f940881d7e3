package nccl

import (
	"reflect"
	"strings"
	"testing"
)

func fakeEnv(vars map[string]string, files []string) SearchEnv {
	return SearchEnv{
		Getenv: func(k string) string { return vars[k] },
		Glob: func(pat string) ([]string, error) {
			var out []string
			for _, f := range files {
				if ok, _ := globMatch(pat, f); ok {
					out = append(out, f)
				}
			}
			return out, nil
		},
	}
}

func TestCandidatesOrder(t *testing.T) {
	venv := "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
	env := fakeEnv(map[string]string{"HOME": "/root"}, []string{venv})
	got := Candidates("", env)
	var paths []string
	for _, c := range got {
		paths = append(paths, c.Path)
	}
	want := []string{"libnccl.so.2", "libnccl.so", venv}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("got %v, want %v", paths, want)
	}
	if got[2].Source != "python environment" {
		t.Errorf("source %q", got[2].Source)
	}
}

func TestCandidatesFlagAndEnvWin(t *testing.T) {
	env := fakeEnv(map[string]string{EnvLib: "/env/libnccl.so.2"}, nil)
	if got := Candidates("/flag/libnccl.so.2", env); len(got) != 1 || got[0].Path != "/flag/libnccl.so.2" || got[0].Source != "--nccl-lib" {
		t.Fatalf("flag: %v", got)
	}
	if got := Candidates("", env); len(got) != 1 || got[0].Path != "/env/libnccl.so.2" || !strings.Contains(got[0].Source, EnvLib) {
		t.Fatalf("env: %v", got)
	}
}

func TestCandidatesVirtualEnv(t *testing.T) {
	lib := "/work/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
	env := fakeEnv(map[string]string{"VIRTUAL_ENV": "/work/venv"}, []string{lib})
	got := Candidates("", env)
	if len(got) != 3 || got[2].Path != lib {
		t.Fatalf("got %v", got)
	}
}

func TestFormatVersion(t *testing.T) {
	cases := map[int]string{22803: "2.28.3", 21805: "2.18.5", 2708: "2.7.8", 20905: "2.9.5"}
	for code, want := range cases {
		if got := FormatVersion(code); got != want {
			t.Errorf("FormatVersion(%d) = %q, want %q", code, got, want)
		}
	}
	if !AtLeast(22803, 2, 28, 3) || AtLeast(22709, 2, 28, 3) || !AtLeast(2708, 2, 7, 0) || AtLeast(2708, 2, 10, 0) {
		t.Error("AtLeast comparisons wrong")
	}
}
