package cli

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"collbench/engine"
)

// fuzzValues are the values the command-line fuzzer gives flags: valid
// ones, malformed ones and boundary ones.
var fuzzValues = []string{"", " ", "0", "1", "2", "-1", "3", "7", "100000", "1e9", "abc", "all", "none", "8", "4K", "1M",
	"8:64K", "1M:8M:+1M", "8:1K:x3", "1G", "-5", "0.5", "NaN", "[[0,1],[2,3]]", "[[0,1],[1,2]]", "pairs", "pairs:x", "stride:2",
	"float,fp32", "double", "bf16", "sum,max", "out-of-place", "table", "json", "csv", "markdown", "-1s", "0s", "1ms", "70000",
	"cpu", "nccl", "auto", "x,,y", "\x00", "../../etc/passwd", "☃"}

// fuzzSkip are commands the fuzzer leaves out: they start processes
// (launch), write outside the test's directory on purpose (man), wait on
// a peer (stream, world), or are internal (algorithm-probe, help).
var fuzzSkip = []string{"launch", "man", "stream", "world", "algorithm-probe", "help", "doctor"}

// fuzzCommands lists the leaf commands of the tree with their flags.
func fuzzCommands() []*cobra.Command {
	io, _, _ := TestIO()
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			if slices.Contains(fuzzSkip, s.Name()) {
				continue
			}
			if s.HasSubCommands() {
				walk(s)
				continue
			}
			out = append(out, s)
		}
	}
	walk(NewCmdRoot(NewFactory(io)))
	return out
}

// fuzzArgs builds a command line from choices: a command, then flags of
// its real flag set with values from fuzzValues, and maybe a stray word.
func fuzzArgs(cmds []*cobra.Command, pick func(n int) int, dir string) []string {
	c := cmds[pick(len(cmds))]
	var path []string
	for p := c; p != nil && p.HasParent(); p = p.Parent() {
		path = append([]string{p.Name()}, path...)
	}
	var flags []*pflag.Flag
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			flags = append(flags, f)
		}
	})
	args := path
	for i, n := 0, pick(5); i < n && len(flags) > 0; i++ {
		f := flags[pick(len(flags))]
		name := "--" + f.Name
		if f.Shorthand != "" && pick(2) == 0 {
			name = "-" + f.Shorthand
		}
		v := fuzzValues[pick(len(fuzzValues))]
		switch {
		case f.Name == "output" || f.Name == "record" || f.Name == "prom" || f.Name == "dir" || f.Name == "html":
			v = filepath.Join(dir, "out"+v)
		case f.Value.Type() == "bool" && pick(2) == 0:
			args = append(args, name)
			continue
		}
		args = append(args, name+"="+v)
	}
	if pick(4) == 0 {
		args = append(args, fuzzValues[pick(len(fuzzValues))])
	}
	return args
}

// checkCommandLine runs args for at most budget and checks the contract:
// no panic, an exit code from the documented set, and at most one error
// line on a usage error.
func checkCommandLine(t *testing.T, args []string, budget time.Duration) {
	t.Helper()
	f, _, errOut := testFactory()
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(budget, cancel)
	defer timer.Stop()
	defer cancel()
	var code int
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%q panicked: %v", args, r)
			}
		}()
		code = Run(ctx, f, args)
	}()
	documented := []int{engine.ExitOK, engine.ExitCheckFailed, engine.ExitUsage, engine.ExitRunFailed, engine.ExitHung, engine.ExitInconclusive, engine.ExitInterrupted, engine.ExitTerminated}
	if !slices.Contains(documented, code) {
		t.Fatalf("%q: exit %d is not a documented exit code\n%s", args, code, errOut)
	}
	if code == engine.ExitUsage {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(errOut.String(), "\n"), "\n") {
			if l != "" && !strings.HasPrefix(l, "collbench: backend ") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 1 {
			t.Fatalf("%q: a usage error in %d lines:\n%s", args, len(lines), errOut)
		}
	}
	for _, bad := range []string{"panic:", "goroutine 1 [", "runtime error", "context canceled", "context deadline exceeded", "launch launch"} {
		if strings.Contains(errOut.String(), bad) {
			t.Fatalf("%q: stderr has %q:\n%s", args, bad, errOut)
		}
	}
}

// TestCommandLineRandom drives the command line with 150 random command
// lines built from the real flag sets (a fixed seed, so a failure
// reproduces); FuzzCommandLine explores further under go test -fuzz.
func TestCommandLineRandom(t *testing.T) {
	t.Parallel()
	cmds := fuzzCommands()
	rng := rand.New(rand.NewPCG(14, 2026)) //nolint:gosec // a seeded generator, so a failing case can be replayed
	dir := t.TempDir()
	n := 150
	if testing.Short() {
		n = 50 // make test; make test-long tries 150
	}
	for i := 0; i < n; i++ {
		args := fuzzArgs(cmds, rng.IntN, dir)
		checkCommandLine(t, args, 300*time.Millisecond)
	}
}

// FuzzCommandLine: go test -fuzz FuzzCommandLine ./cmd/collbench/cli.
// The fuzzer's bytes choose the command, flags and values.
func FuzzCommandLine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{5, 3, 9, 40, 2, 7})
	f.Add([]byte{17, 2, 1, 0, 4, 4, 4, 4})
	cmds := fuzzCommands()
	f.Fuzz(func(t *testing.T, choices []byte) {
		i := 0
		pick := func(n int) int {
			if n <= 0 {
				return 0
			}
			var b byte
			if i < len(choices) {
				b = choices[i]
			}
			i++
			return int(b) % n
		}
		checkCommandLine(t, fuzzArgs(cmds, pick, t.TempDir()), 300*time.Millisecond)
	})
}
