package doctor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
)

// maxMeterMethods bounds what a stage may call on the meter: its own
// methods and its site's, which it embeds.
const maxMeterMethods = 15

// TestMeterStaysNarrow: the meter that stages measure with keeps few
// methods; what a stage needs beyond them is its own.
func TestMeterStaysNarrow(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var methods []string
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && (id.Name == "meter" || id.Name == "site") {
					methods = append(methods, id.Name+"."+fd.Name.Name)
				}
			}
		}
	}
	slices.Sort(methods)
	if len(methods) > maxMeterMethods || len(methods) < 5 {
		t.Errorf("the meter has %d methods (its site's included), want 5 to %d: %s", len(methods), maxMeterMethods, strings.Join(methods, ", "))
	}
}

// TestVerdictIsAPureFunctionOfItsEvidence: the verdict over the same
// evidence is the same every time, and leaves the evidence as it was
// (the figures it completes are its own copies).
func TestVerdictIsAPureFunctionOfItsEvidence(t *testing.T) {
	d := railSearch(4, 2, map[int]float64{5: 0.4}, nil, 0)
	d.o.Transport = func(a, b int) string { return "P2P/IPC" }
	d.rep.Pairs = []record.PairFigure{{A: 0, B: 1, Host: "node-00", Both: 10, AB: 10, BA: 10}, {A: 2, B: 3, Host: "node-01", Both: 100, AB: 100, BA: 100}}
	d.slowPairs["0-1"] = rules.Suspect{Sample: rules.Sample{Key: "0-1", Value: 10}, Peers: 100, Metric: "both-ways"}
	d.rep.Counters = []facts.CounterGrowth{{Host: "node-00", Stage: "pair", Part: facts.CounterPart{GPU: 0, Link: 1}, Counter: facts.CtrNVLinkCRCData, After: 5000}}
	d.seen.moved = map[string]map[int]*traffic{"pair": {0: {Link: 1e9}}}
	e := evidenceOf(d.meter, d.outcome)
	pairs, counters := slices.Clone(e.pairFigs), slices.Clone(e.counters)
	first, second := reachVerdict(e), reachVerdict(e)
	if !reflect.DeepEqual(first, second) {
		t.Errorf("two verdicts over one evidence differ:\n%+v\n%+v", first, second)
	}
	if !reflect.DeepEqual(e.pairFigs, pairs) || !reflect.DeepEqual(e.counters, counters) {
		t.Errorf("the verdict changed its evidence: pairs %+v, counters %+v", e.pairFigs, e.counters)
	}
	// It judged something: the pair, the NIC's paths, the counter, and put
	// NCCL's transport beside each pair.
	kinds := map[string]bool{}
	for _, f := range first.findings {
		kinds[f.Kind] = true
	}
	if !kinds["slow-pair"] || !kinds["slow-nic"] || first.healthy || !kinds["counter-growth"] || first.pairs[0].Transport != "P2P/IPC" {
		t.Errorf("verdict %+v: want a slow pair, a slow NIC, the counter, and transports beside the pairs", first)
	}
}
