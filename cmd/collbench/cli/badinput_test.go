package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"collbench/engine"
)

// goInternals matches what a user must never read in an error: Go type and
// package names, strconv's, time's and encoding/json's own words, yaml's
// tags, an internal probe file.
var goInternals = regexp.MustCompile(`strconv\.|json\.|(?:^|\s)json:|Go (value|struct)|of type|reflect|unmarshal|!!(str|int|map|seq)|` +
	`map\[|\[\][a-z]|\b[a-z]+\.[A-Z][A-Za-z]+\b|time: invalid|invalid syntax|\.collbench-|panic|goroutine`)

// badInputCases are bad inputs of every kind, through every command: a
// wrong type, a value out of range, zero, negative, huge, flags that
// conflict, unknown names, empty values, missing files and files of the
// wrong shape. "@" in an argument is the fixture directory; ” is an empty
// argument. Each must exit 2 with one line that names the problem, print
// nothing on stdout and write nothing.
var badInputCases = []struct {
	args string
	env  string // NAME=VALUE, or ""
	want string
}{
	// types
	{"allreduce -n x", "", `invalid --iters "x": it takes a whole number`},
	{"allreduce -n 1.5", "", `invalid --iters "1.5"`},
	{"allreduce -w x", "", `invalid --warmup "x"`},
	{"allreduce -c yes", "", `invalid --check "yes"`},
	{"allreduce -g two", "", `invalid --ranks "two"`},
	{"allreduce -N x", "", `invalid --cycles "x"`},
	{"allreduce -m x", "", `invalid --agg "x"`},
	{"allreduce -u x", "", `invalid --misalign "x"`},
	{"allreduce -z x", "", `invalid --blocking "x"`},
	{"allreduce -f x", "", `invalid --stepfactor "x"`},
	{"allreduce --seed x", "", `invalid --seed "x": it takes a whole number, 0 or more`},
	{"allreduce --seed -1", "", `invalid --seed "-1": it takes a whole number, 0 or more`},
	{"allreduce --timeout x", "", `invalid --timeout "x": it takes a duration such as`},
	{"allreduce --timeout 5", "", `invalid --timeout "5": it takes a duration`},
	{"allreduce --heartbeat-timeout soon", "", `invalid --heartbeat-timeout "soon"`},
	{"allreduce --bootstrap-timeout 2x", "", `invalid --bootstrap-timeout "2x"`},
	{"allreduce --device gpu0", "", `invalid --device "gpu0"`},
	{"allreduce --cuda-graph x", "", `invalid --cuda-graph "x"`},
	{"allreduce --iter-stats=maybe", "", `invalid --iter-stats "maybe": it takes true or false`},
	{"allreduce --sizes 1Q", "", `invalid size "1Q"`},
	{"allreduce --sizes 8,x", "", `invalid size "x"`},
	{"allreduce -b x -e 64", "", `invalid size "x"`},
	{"allreduce -r x", "", `invalid --root "x"`},
	{"allreduce --dtype 7", "", `unknown dtype "7"`},
	// ranges
	{"allreduce -z 5", "", "invalid --blocking 5"},
	{"allreduce -u 5000", "", "invalid --misalign 5000"},
	{"allreduce -r 9", "", "invalid --root 9: must be between 0 and 3"},
	{"broadcast -r 4", "", "invalid --root 4"},
	{"reduce -r 99", "", "invalid --root 99"},
	{"allreduce --sizes 8:4", "", "start 8 is larger than end 4"},
	{"allreduce -b 8 -e 4", "", "start 8 is larger than end 4"},
	{"allreduce --sizes 2T", "", "larger than the 1T limit"},
	{"allreduce --heartbeat-timeout 1s", "", "invalid --heartbeat-timeout 1s: must be at least 2s"},
	{"allreduce --timeout -1s", "", "invalid --timeout -1s"},
	{"allreduce --device -5", "", "invalid --device -5: must be -1 or more"},
	{"allreduce --rank-list [[0,4]]", "", "rank 4 in group 0 is outside the world of 4 ranks"},
	{"allreduce --rank-list stride:0", "", `"0" is not a valid stride value`},
	{"allreduce --rank-list mod:0", "", `"0" is not a valid mod value`},
	// zero
	{"allreduce -g 0", "", "invalid --ranks 0: must be 1 or more"},
	{"allreduce -n 0", "", "invalid --iters 0"},
	{"allreduce -N 0", "", "invalid --cycles 0"},
	{"allreduce -m 0", "", "invalid --agg 0"},
	{"allreduce -f 0", "", "invalid --stepfactor 0: must be 2 or more"},
	{"allreduce -f 1", "", "invalid --stepfactor 1: must be 2 or more"},
	{"allreduce --sizes 0", "", "positive"},
	{"allreduce -i 0 -b 8 -e 64", "", "sizes must be positive"},
	{"allreduce --bootstrap-timeout 0", "", "invalid --bootstrap-timeout 0s"},
	{"allreduce --heartbeat-timeout 0", "", "invalid --heartbeat-timeout 0s"},
	{"doctor -n 0", "", "invalid --iters 0: must be 1 or more"},
	{"doctor -g 0", "", "invalid --ranks 0"},
	{"doctor --bw-size 0", "", "invalid --bw-size"},
	{"doctor --latency-size 0", "", "invalid --latency-size"},
	{"verify-groups -g 0", "", "invalid --ranks 0"},
	{"verify-groups --sizes 0", "", "sizes must be positive"},
	{"launch -n 0 -- allreduce", "", "invalid --procs 0: must be 1 or more"},
	{"launch --nodes 0 -- allreduce", "", "invalid --nodes 0"},
	{"launch --nnodes 0 -- allreduce", "", "invalid --nnodes 0"},
	{"stream --duration 0 --connect 127.0.0.1:1", "", "invalid --duration 0s"},
	{"world --bootstrap-timeout 0", "", "invalid --bootstrap-timeout 0s"},
	{"compare --time-threshold 0 @/a.json @/a.json", "", "invalid --time-threshold 0"},
	// negative
	{"allreduce -g -1", "", "invalid --ranks -1"},
	{"allreduce -n -1", "", "invalid --iters -1"},
	{"allreduce -w -1", "", "invalid --warmup -1"},
	{"allreduce -c -1", "", "invalid --check -1"},
	{"allreduce -N -2", "", "invalid --cycles -2"},
	{"allreduce -m -1", "", "invalid --agg -1"},
	{"allreduce -u -1", "", "invalid --misalign -1"},
	{"allreduce --cuda-graph -1", "", "invalid --cuda-graph -1"},
	{"allreduce --sizes -8", "", "invalid size"},
	{"allreduce --rank-list [[0,-1]]", "", "is negative"},
	{"doctor --world-size -1", "", "invalid --world-size"},
	{"doctor -n -3", "", "invalid --iters -3"},
	{"launch -n -1 -- allreduce", "", "invalid --procs -1"},
	{"launch --port -1 -- allreduce", "", "invalid --port -1"},
	{"compare --busbw-threshold -5 @/a.json @/a.json", "", "invalid --busbw-threshold -5"},
	{"compare --time-floor -1 @/a.json @/a.json", "", "invalid --time-floor -1"},
	{"run --config @/suite.yaml --timeout -1s", "", "invalid --timeout -1s"},
	// huge
	{"allreduce --seed 99999999999999999999999", "", `invalid --seed "99999999999999999999999": too large`},
	{"allreduce -n 99999999999999999999", "", `invalid --iters "99999999999999999999": too large`},
	{"allreduce -g 99999999999999999999", "", `invalid --ranks "99999999999999999999": too large`},
	{"allreduce --sizes 99999999999999999999", "", "larger than the 1T limit"},
	{"allreduce --rank-list [[0,99999999999999999999]]", "", "rank number 99999999999999999999 is too large"},
	{"launch --port 99999 -- allreduce", "", "invalid --port 99999"},
	{"launch --nodes 9 -n 4 -- allreduce", "", "invalid --nodes 9: must divide the 4 processes"},
	{"allreduce --timeout 999999999999h", "", `invalid --timeout "999999999999h"`},
	// conflicting
	{"allreduce -b 8 -e 64 -f 4 -i 8", "", "--stepbytes and --stepfactor cannot go together"},
	{"allreduce --sizes 8 -b 8", "", "either --sizes or -b"},
	{"alltoall --mode in-place", "", "alltoall run out-of-place only"},
	{"allreduce --dtype e4m3 --op prod", "", "op prod on dtype f8e4m3"},
	{"allreduce --dtype e5m2 --op avg", "", "op avg on dtype f8e5m2"},
	{"sendrecv --cuda-graph 10", "", "--cuda-graph needs the nccl backend"},
	{"stream --listen :0 --connect 127.0.0.1:1", "", "--connect and --listen cannot go together"},
	{"run --config @/suite.yaml --baseline @/a.json --no-baseline", "", "--baseline and --no-baseline cannot go together"},
	{"launch --nnodes 2 --nodes 2 -n 4 --node-rank 0 --root-addr h:1 -- allreduce", "", "--nodes simulates hosts on one host"},
	{"allreduce --rank-list [[0,1],[1,2]]", "", "rank 1 appears in groups 0 and 1"},
	{"verify-groups --rank-list [[0],[0]]", "", "rank 0 appears in groups 0 and 1"},
	// unknown
	{"allscatter", "", `unknown command "allscatter"`},
	{"allreduce --no-such-flag", "", "unknown flag: --no-such-flag"},
	{"allreduce -Q", "", "unknown shorthand flag"},
	{"allreduce --dtype float128", "", `unknown dtype "float128" (valid: int8`},
	{"allreduce --op xor", "", `unknown op "xor" (valid: sum`},
	{"allreduce --mode sideways", "", "unknown --mode"},
	{"allreduce --average median", "", "unknown --average"},
	{"allreduce --format xml", "", "unknown --format"},
	{"allreduce --backend tpu", "", "unknown --backend"},
	{"allreduce -R 7", "", `unknown --register "7"`},
	{"allreduce --rank-list bananas", "", "nor a preset"},
	{"sweep --collectives allreduce,allscatter", "", `unknown collective "allscatter"`},
	{"doctor --format xml", "", "xml"},
	{"doctor --backend tpu", "", "tpu"},
	{"verify-groups --format xml", "", "xml"},
	{"compare --format xml @/a.json @/a.json", "", "xml"},
	{"plot --kind pie -o @/out/p.svg @/a.json", "", "pie"},
	{"plot --format gif -o - @/a.json", "", "gif"},
	{"topo --format xml", "", "xml"},
	{"allreduce", "COLLBENCH_NNODE=2", "unknown variable COLLBENCH_NNODE: collbench does not read it; did you mean COLLBENCH_NNODES?"},
	{"allreduce", "COLLBENCH_FAULTS=bogus", `invalid COLLBENCH_FAULTS="bogus": "bogus": unknown fault`},
	{"allreduce", "COLLBENCH_ALGORITHM_PROBE=maybe", `invalid COLLBENCH_ALGORITHM_PROBE="maybe": must be one of`},
	{"allreduce", "COLLBENCH_CUDA_SYNC=poll", `invalid COLLBENCH_CUDA_SYNC="poll"`},
	// COLLBENCH_* variables, checked like their flags
	{"launch -- allreduce", "COLLBENCH_NNODES=x", `invalid COLLBENCH_NNODES="x": is not a whole number`},
	{"launch -- allreduce", "COLLBENCH_NNODES=0", `invalid COLLBENCH_NNODES="0": must be 1 or more`},
	{"launch -- allreduce", "COLLBENCH_NODE_RANK=-1", `invalid COLLBENCH_NODE_RANK="-1": must be 0 or more`},
	{"world", "COLLBENCH_PORT=99999", `invalid COLLBENCH_PORT="99999"`},
	{"world", "COLLBENCH_ROOT_ADDR=nohost", `invalid COLLBENCH_ROOT_ADDR="nohost": must be host:port`},
	{"world", "COLLBENCH_WORLD_SIZE=0", `invalid COLLBENCH_WORLD_SIZE="0": must be 1 or more`},
	{"world", "COLLBENCH_RANK=first", `invalid COLLBENCH_RANK="first"`},
	{"doctor", "COLLBENCH_DEVICE=-3", `invalid COLLBENCH_DEVICE="-3"`},
	{"allreduce", "COLLBENCH_PROBE_TIMEOUT=-1s", `invalid COLLBENCH_PROBE_TIMEOUT="-1s"`},
	{"allreduce", "COLLBENCH_LOCAL_SIZE=0", `invalid COLLBENCH_LOCAL_SIZE="0"`},
	// empty
	{"allreduce --sizes ''", "", "--sizes is empty"},
	{"allreduce --dtype ''", "", "--dtype is empty"},
	{"allreduce --op ''", "", "--op is empty"},
	{"allreduce --rank-list ''", "", "--rank-list is empty"},
	{"allreduce -o ''", "", "--output is empty"},
	{"doctor --bw-size ''", "", "--bw-size is empty"},
	{"compare @/empty.json @/a.json", "", "the file is empty"},
	{"report -o @/out/r.html @/empty.json", "", "the file is empty"},
	{"plot -o @/out/p.svg @/empty.json", "", "the file is empty"},
	{"baseline make @/empty.json", "", "the file is empty"},
	{"run --config @/empty.yaml", "", "empty.yaml"},
	// missing
	{"compare", "", "compare needs two files"},
	{"compare @/a.json", "", "compare needs two files"},
	{"compare @/a.json @/a.json @/a.json", "", "compare needs two files"},
	{"compare @/missing.json @/a.json", "", "cannot read"},
	{"report -o @/out/r.html @/missing.json", "", "cannot read"},
	{"report @/a.json", "", "report needs -o FILE.html"},
	{"plot @/a.json", "", "plot needs -o"},
	{"plot -o @/out/p.svg @/missing.json", "", "cannot read"},
	{"baseline make", "", "baseline make needs at least one run file"},
	{"baseline make @/missing.json", "", "cannot read"},
	{"run", "", "run needs --config"},
	{"run --config @/missing.yaml", "", "cannot read config"},
	{"doctor --config @/missing.yaml", "", "cannot read config"},
	{"topo --facts @/missing.json", "", "cannot read --facts"},
	{"topo --nccl-log @/missing.log", "", "cannot read"},
	{"launch", "", "launch needs a collbench command"},
	{"stream", "", "stream needs exactly one of --listen"},
	{"allreduce -o @/nodir/x.json", "", "cannot write --output"},
	{"doctor -o @/nodir/x.json", "", "--output"},
	{"doctor --prom @/nodir/x.prom", "", "--prom"},
	{"doctor --html @/nodir/x.html", "", "--html"},
	{"compare -o @/nodir/c.txt @/a.json @/a.json", "", "--output"},
	{"allreduce -o @", "", "is a directory"},
	{"allreduce extra", "", "takes no arguments"},
	{"doctor extra", "", "takes no arguments"},
	// wrong shape
	{"compare @/list.json @/a.json", "", "the file holds a JSON list"},
	{"compare @/object.json @/a.json", "", `not a collbench result document (schema "x")`},
	{"compare @/wrongfield.json @/a.json", "", `field "results" holds a JSON string where a list belongs`},
	{"compare @/wrongnumber.json @/a.json", "", `holds a JSON string where a whole number belongs`},
	{"compare @/cut.json @/a.json", "", "the JSON ends early"},
	{"compare @/broken.json @/a.json", "", "not valid JSON at byte"},
	{"compare @/notes.txt @/a.json", "", `it starts with "# my notes"`},
	{"compare @/oldlog.txt @/a.json", "", "name the file after the benchmark"},
	{"report -o @/out/r.html @/list.json", "", "the file holds a JSON list"},
	{"plot -o @/out/p.svg @/wrongfield.json", "", `field "results"`},
	{"baseline make @/nokind.json", "", `a JSON object without "schema"`},
	{"run --config @/bad.yaml", "", "bad.yaml: line 1"},
	{"run --config @/badtype.yaml", "", `"abc" is not a whole number`},
	{"run --config @/badlist.yaml", "", `"5" is not a list`},
	{"run --config @/unknownkey.yaml", "", `unknown key "colectives"`},
	{"doctor --config @/bad.yaml", "", "bad.yaml: line 1"},
	{"topo --facts @/list.json", "", "is not a file of GPU facts"},
	{"topo --facts @/object.json", "", `unknown field "schema"`},
	{"topo --nccl-xml @/object.json", "", "no XML in it"},
	{"topo --nccl-xml @/notes.txt", "", "topology dump"},
}

// TestBadInputEveryCommand walks the bad-input table through every command:
// exit 2, one line on stderr in the user's words (no Go internals), nothing
// on stdout, nothing written or replaced in the fixture directory.
func TestBadInputEveryCommand(t *testing.T) {
	if len(badInputCases) < 149 {
		t.Fatalf("only %d bad-input cases: the table must keep at least 149", len(badInputCases))
	}
	dir := t.TempDir()
	good := writeGoodResult(t, dir)
	files := map[string]string{
		"a.json":           good,
		"empty.json":       "",
		"list.json":        "[1, 2]",
		"object.json":      `{"schema": "x", "something": 1}`,
		"nokind.json":      `{"something": 1}`,
		"wrongfield.json":  `{"schema": "collbench/result", "schema_version": 1, "results": "x"}`,
		"wrongnumber.json": `{"schema": "collbench/result", "schema_version": 1, "results": [{"collective": "allreduce", "size_bytes": "8"}]}`,
		"cut.json":         good[:len(good)/2],
		"broken.json":      `{"schema": "collbench/result" "x": 1}`,
		"notes.txt":        "# my notes\nnothing measured here\n",
		"oldlog.txt":       "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n        1024           256   float     sum    20.10    0.05    0.04  0e+00    20.10    0.05    0.04  0e+00\n",
		"suite.yaml":       "suites:\n  - collectives: [allreduce]\n    sizes: \"8\"\n",
		"empty.yaml":       "",
		"bad.yaml":         "x: [\n",
		"badtype.yaml":     "iterations: abc\nsuites:\n  - collectives: [allreduce]\n",
		"badlist.yaml":     "suites:\n  - collectives: 5\n",
		"unknownkey.yaml":  "suites:\n  - colectives: [allreduce]\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := listTree(t, dir)
	seen := map[string]bool{}
	for _, c := range badInputCases {
		key := c.env + " " + c.args
		if seen[key] {
			t.Errorf("%s: listed twice", key)
		}
		seen[key] = true
		var args []string
		for _, a := range strings.Fields(c.args) {
			if a == "''" {
				a = ""
			}
			args = append(args, strings.ReplaceAll(a, "@", dir))
		}
		f, out, errOut := testFactory()
		if c.env != "" {
			env := f.Environ()
			f.Environ = func() []string { return append(env, c.env) }
		}
		code := run(t, f, args...)
		msg := errOut.String()
		label := strings.TrimSpace(c.env + " collbench " + c.args)
		if code != engine.ExitUsage {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", label, code, msg)
		}
		if out.Len() != 0 {
			t.Errorf("%s: printed on stdout: %q", label, out)
		}
		if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "collbench: ") {
			t.Errorf("%s: want one line on stderr, got %q", label, msg)
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: stderr %q does not say %q", label, msg, c.want)
		}
		if m := goInternals.FindString(strings.ReplaceAll(msg, dir, "DIR")); m != "" {
			t.Errorf("%s: stderr %q names Go internals (%q)", label, msg, m)
		}
		if after := listTree(t, dir); after != before {
			t.Fatalf("%s: wrote or replaced files:\nbefore %s\nafter  %s", label, before, after)
		}
	}
}

// writeGoodResult measures a tiny run and returns its JSON document.
func writeGoodResult(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "good.json")
	f, _, errOut := testFactory()
	if code := run(t, f, "allreduce", "--sizes", "8,1K", "-n", "2", "-w", "0", "-q", "-o", path); code != 0 {
		t.Fatalf("the good run failed: %s", errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// listTree is every path under dir with its size, mode and time.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %v %d", strings.TrimPrefix(p, dir), fi.Size(), fi.Mode(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "; ")
}
