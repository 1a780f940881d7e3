package nccl

import (
	"collbench/backend/nccl/driver"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// EnvLib names the environment variable that points at a libnccl.so.
const EnvLib = "COLLBENCH_NCCL_LIB"

// Candidate is one place the loader tries, in order.
type Candidate = driver.Candidate

// SearchEnv is what discovery reads from the system; tests replace it.
type SearchEnv struct {
	Getenv func(string) string
	Glob   func(string) ([]string, error)
}

// SystemSearchEnv reads the real environment and file system.
func SystemSearchEnv() SearchEnv { return SearchEnv{Getenv: os.Getenv, Glob: filepath.Glob} }

// pythonGlobs are where Python environments keep the NCCL wheel's library
// (the nvidia-nccl-cu* packages install nvidia/nccl/lib/libnccl.so.2).
var pythonGlobs = []string{
	"$VIRTUAL_ENV/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"$CONDA_PREFIX/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"$HOME/.local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2",
	"/opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/opt/*/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/opt/conda/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
}

// Candidates lists where to look for NCCL, in order: the --nccl-lib flag,
// $COLLBENCH_NCCL_LIB, the dynamic linker's search (LD_LIBRARY_PATH, the
// system), then NCCL inside Python environments. A flag or variable, when
// set, is the only candidate: asking for a library means that library.
func Candidates(flag string, env SearchEnv) []Candidate {
	if flag != "" {
		return []Candidate{{Path: flag, Source: "--nccl-lib"}}
	}
	if v := env.Getenv(EnvLib); v != "" {
		return []Candidate{{Path: v, Source: "$" + EnvLib}}
	}
	out := []Candidate{{Path: "libnccl.so.2", Source: "dynamic linker"}, {Path: "libnccl.so", Source: "dynamic linker"}}
	seen := map[string]bool{}
	for _, g := range pythonGlobs {
		pat := os.Expand(g, env.Getenv)
		if strings.HasPrefix(pat, "/lib/") && strings.HasPrefix(g, "$") {
			continue // the variable was unset
		}
		matches, _ := env.Glob(pat)
		sort.Sort(sort.Reverse(sort.StringSlice(matches))) // newest python first
		for _, m := range matches {
			if !seen[m] {
				seen[m] = true
				out = append(out, Candidate{Path: m, Source: "python environment"})
			}
		}
	}
	return out
}

// FormatVersion decodes ncclGetVersion's code: major·10000 + minor·100 +
// patch since 2.9, major·1000 + minor·100 + patch before.
func FormatVersion(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
}

// versionCode normalises old-style codes to the new scheme for comparisons.
func versionCode(code int) int {
	if code >= 10000 {
		return code
	}
	return code/1000*10000 + code%1000/100*100 + code%100
}

// AtLeast reports whether code is version major.minor.patch or newer.
func AtLeast(code, major, minor, patch int) bool {
	return versionCode(code) >= major*10000+minor*100+patch
}
