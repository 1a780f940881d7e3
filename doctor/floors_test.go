package doctor

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// floors places each file of the doctor's own package on a floor, lowest
// first, as the package comment (doctor.go) tells them: a file uses what
// files on its own floor or below declare, never what a file above
// declares. The floors below these are packages (internal/facts,
// internal/record, internal/rules, internal/render), which the import test
// holds (cmd/collbench/arch_test.go, doctorFloors).
var floors = [][]string{
	// the evidence and the verdict: where the ranks run, what measuring
	// observed, and the rules that turn the stages' outcomes into findings;
	// api.go names what the rest of collbench uses of the floors below
	{"api.go", "site.go", "observe.go", "explain.go", "paths.go", "shared.go", "counterstage.go"},
	// the meter and the stages of the search, over one world of ranks
	{"doctor.go", "notes.go", "kit.go", "alone.go", "pairs.go", "acrosshosts.go", "acrossleaves.go", "confirm.go",
		"wholeworld.go", "simulate.go"},
}

// use is one file's use of an identifier another file of the package
// declares at its top level.
type use struct{ from, name, to string }

// packageUses type-checks the doctor's files (not its tests) and returns
// every use of a top-level identifier across files; it fails on a file on
// no floor, and skips where go list -export cannot run.
func packageUses(t *testing.T, floorOf map[string]int) []use {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		if _, ok := floorOf[n]; !ok {
			t.Errorf("%s is on no floor: place it in floors (floors_test.go) and in doctor.go's package comment", n)
		}
		af, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, af)
	}
	for n := range floorOf {
		if _, err := os.Stat(n); err != nil {
			t.Errorf("floors names %s, which is gone", n)
		}
	}
	// The imports from their export data, as go list -export finds it in
	// the build cache.
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".").Output()
	if err != nil {
		t.Skipf("go list -export: %v", err)
	}
	export := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			export[path] = file
		}
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if f, ok := export[path]; ok {
			return os.Open(f)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := conf.Check("collbench/doctor", fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the doctor: %v", err)
	}
	var uses []use
	for _, af := range files {
		from := fset.Position(af.Pos()).Filename
		ast.Inspect(af, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			o := info.Uses[id]
			if o == nil || o.Pkg() != pkg || !declaredAtTop(o, pkg) {
				return true
			}
			if to := fset.Position(o.Pos()).Filename; to != from {
				uses = append(uses, use{from: from, name: id.Name, to: to})
			}
			return true
		})
	}
	return uses
}

func floorIndex() map[string]int {
	floorOf := map[string]int{}
	for i, fl := range floors {
		for _, f := range fl {
			floorOf[f] = i
		}
	}
	return floorOf
}

func TestDoctorFilesUseNothingAbove(t *testing.T) {
	floorOf := floorIndex()
	var bad []string
	for _, u := range packageUses(t, floorOf) {
		if floorOf[u.to] > floorOf[u.from] {
			bad = append(bad, u.from+" uses "+u.name+" from "+u.to)
		}
	}
	slices.Sort(bad)
	for _, b := range slices.Compact(bad) {
		t.Errorf("a use up a floor: %s", b)
	}
}

// stageUnits are the stages' files, grouped by stage: the across-hosts
// stage is its rounds (acrosshosts.go), the pairs it measures again
// (confirm.go) and its rounds between leaves (acrossleaves.go).
var stageUnits = [][]string{
	{"alone.go"}, {"pairs.go"}, {"acrosshosts.go", "confirm.go", "acrossleaves.go"}, {"wholeworld.go"},
}

// TestStageFilesNameOnlyTheirOwn: a stage's file uses what the framework
// (doctor.go, kit.go) and the floors below declare, never another stage's
// identifiers, so a new stage is its file, a line in the stage list and
// its explanation rule (explain.go, which reads every stage's result).
func TestStageFilesNameOnlyTheirOwn(t *testing.T) {
	unitOf := map[string]int{}
	for i, u := range stageUnits {
		for _, f := range u {
			unitOf[f] = i + 1
		}
	}
	var bad []string
	for _, u := range packageUses(t, floorIndex()) {
		if a, b := unitOf[u.from], unitOf[u.to]; a > 0 && b > 0 && a != b {
			bad = append(bad, u.from+" uses "+u.name+" from "+u.to)
		}
	}
	slices.Sort(bad)
	for _, b := range slices.Compact(bad) {
		t.Errorf("a stage names another's identifier: %s", b)
	}
}

// declaredAtTop reports whether o is declared at the package's top level:
// a function, method, type, variable or constant (a struct's fields go
// with their type).
func declaredAtTop(o types.Object, pkg *types.Package) bool {
	switch o := o.(type) {
	case *types.Func:
		return true
	case *types.Var:
		return !o.IsField() && o.Parent() == pkg.Scope()
	}
	return o.Parent() == pkg.Scope()
}
