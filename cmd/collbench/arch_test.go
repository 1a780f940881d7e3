package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// engineMaxImports is the most collbench packages the engine may import:
// it runs workflows through the packages that own them, and every import
// past this is a workflow's detail that came to live in the engine. It
// only goes down.
const engineMaxImports = 18

// layers are collbench's floors, lowest first, as docs/architecture.md
// draws them: a package imports only packages of its own floor or below.
// A package missing here fails the test, so a new one is placed
// deliberately.
var layers = [][]string{
	{"dtype", "internal/..."},
	{"results", "watchdog", "bootstrap", "cuda", "backend/sim/cluster", "launch", "topology", "watch"},
	{"measure", "backend/nccl/driver", "backend/nccl/kernels", "backend/nccl/kernels/hostemu", "backend/nccl/profiler", "backend/nccl/tuner", "tunefile"},
	{"backend/cpu", "backend/mpi", "backend/sim", "backend/nccl", "backend/nccl/fakegpu", "backend/nccl/probe", "report", "tune"},
	{"doctor", "doctor/internal/facts", "doctor/internal/record", "doctor/internal/rules", "doctor/internal/render", "determinism"},
	{"runconfig", "engine"},
	{"cmd/collbench/cli", "cmd/collbench", "cmd/collbench-watch-plugin", "drills"},
}

// cliImports are the only collbench packages the CLI may import: the
// engine that runs every workflow, and what the CLI renders or parses
// flags into (docs/architecture.md).
var cliImports = []string{"engine", "results", "report", "measure", "doctor", "launch"}

// doctorFloors are the doctor's floors that are packages of their own,
// lowest first, and the doctor itself (its evidence, verdict, meter and
// stages) on top: one of them imports only those before it.
var doctorFloors = []string{"doctor/internal/facts", "doctor/internal/record", "doctor/internal/rules", "doctor/internal/render", "doctor"}

// cgoAllowed are the bindings, the only packages that may import "C".
var cgoAllowed = []string{"cuda", "backend/nccl", "backend/nccl/profiler", "backend/nccl/tuner", "backend/nccl/fakegpu", "backend/nccl/kernels/hostemu", "backend/mpi", "cmd/collbench-watch-plugin"}

type listed struct {
	ImportPath string
	Imports    []string
	CgoFiles   []string
}

func floor(pkg string) int {
	for i, l := range layers {
		for _, p := range l {
			if p == pkg || (strings.HasSuffix(p, "/...") && strings.HasPrefix(pkg, strings.TrimSuffix(p, "..."))) {
				return i
			}
		}
	}
	return -1
}

// TestImportsGoDownward lists every package (with and without the mpi
// build tag) and fails on an import up a floor, a package on no floor, an
// internal package that imports anything but leaf helpers, and cgo outside
// the bindings.
func TestImportsGoDownward(t *testing.T) {
	for _, tags := range []string{"", "mpi"} {
		args := []string{"list", "-json"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		cmd := exec.Command("go", append(args, "collbench/...")...) //nolint:gosec // G204: the go tool, with fixed arguments
		cmd.Dir = "../.."
		if tags == "mpi" {
			cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		dec := json.NewDecoder(strings.NewReader(string(out)))
		for {
			var p listed
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			me := strings.TrimPrefix(p.ImportPath, "collbench/")
			at := floor(me)
			if at < 0 {
				t.Errorf("%s is on no floor of docs/architecture.md: place it in layers", me)
				continue
			}
			ours := 0
			for _, imp := range p.Imports {
				if !strings.HasPrefix(imp, "collbench/") {
					continue
				}
				ours++
				dep := strings.TrimPrefix(imp, "collbench/")
				if me == "cmd/collbench/cli" && !slices.Contains(cliImports, dep) {
					t.Errorf("the CLI imports %s: a workflow belongs in the engine (the CLI may import %s)", dep, strings.Join(cliImports, ", "))
				}
				if i, j := slices.Index(doctorFloors, me), slices.Index(doctorFloors, dep); i >= 0 && j > i {
					t.Errorf("%s imports %s: an import up the doctor's floors (%s)", me, dep, strings.Join(doctorFloors, " < "))
				}
				if f := floor(dep); f > at {
					t.Errorf("%s (floor %d) imports %s (floor %d): an import up a floor", me, at, dep, f)
				}
				if strings.HasPrefix(me, "internal/") && !strings.HasPrefix(dep, "internal/") && dep != "dtype" {
					t.Errorf("%s imports %s: internal packages are leaf helpers", me, dep)
				}
			}
			if me == "engine" && ours > engineMaxImports {
				t.Errorf("the engine imports %d collbench packages, more than %d: move the workflow's detail to the package that owns it", ours, engineMaxImports)
			}
			if len(p.CgoFiles) > 0 && !slices.Contains(cgoAllowed, me) {
				t.Errorf("%s uses cgo: only the bindings may (%s)", me, strings.Join(cgoAllowed, ", "))
			}
		}
	}
}

// TestEngineHasNoTypeAlias: the engine names no other package's type as
// its own (type X = pkg.Y), so that what the CLI handles is the engine's
// own API or a package the CLI may import, never a re-export that hides
// an import.
func TestEngineHasNoTypeAlias(t *testing.T) {
	files, err := filepath.Glob("../../engine/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no engine sources (%v)", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, sp := range g.Specs {
				if ts := sp.(*ast.TypeSpec); ts.Assign.IsValid() {
					t.Errorf("%s: type %s is an alias: give the engine's API its own type, or let the caller use the package that owns it", fset.Position(ts.Pos()), ts.Name)
				}
			}
		}
	}
}
