package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"collbench/engine"
)

// Version is the collbench version; the Makefile sets it from git.
var Version = "0.1.0-dev"

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "collbench",
		Short: "Benchmark and verify GPU collective communication",
		Long: `collbench sweeps message sizes for NCCL collectives, verifies every result
against exactly expected values and prints bandwidth tables that line up with
NCCL's own benchmark. Without GPUs it runs the same collectives on host memory.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(flagError)
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := engine.CheckEnv(f.Environ()); err != nil {
			return err
		}
		return checkGivenFlags(cmd)
	}
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	// collbench completion bash|zsh|fish|powershell, from Cobra.
	root.CompletionOptions.HiddenDefaultCmd = false
	root.Version = Version
	root.SetVersionTemplate(versionLine() + "\n")
	for _, c := range benchCommands(f) {
		root.AddCommand(c)
	}
	root.AddCommand(NewCmdSweep(f, nil))
	root.AddCommand(NewCmdVerifyGroups(f, nil))
	root.AddCommand(NewCmdWorld(f, nil))
	root.AddCommand(NewCmdTopo(f, nil))
	root.AddCommand(NewCmdCompare(f, nil))
	root.AddCommand(NewCmdBaseline(f, nil))
	root.AddCommand(NewCmdReport(f, nil))
	root.AddCommand(NewCmdPlot(f, nil))
	root.AddCommand(NewCmdRun(f, nil))
	root.AddCommand(NewCmdLaunch(f, nil))
	root.AddCommand(NewCmdVersion(f, nil))
	root.AddCommand(NewCmdEnv(f, nil))
	root.AddCommand(NewCmdStream(f, nil))
	root.AddCommand(NewCmdDoctor(f, nil))
	root.AddCommand(NewCmdTune(f, nil))
	root.AddCommand(NewCmdDeterminism(f, nil))
	root.AddCommand(NewCmdWatch(f, nil))
	root.AddCommand(NewCmdAlgorithmProbe(f, nil))
	root.AddCommand(NewCmdMan(f, nil))
	strictHelp(root)
	return root
}

// strictHelp makes `help TOPIC` and `completion SHELL` refuse what they do
// not know (Cobra's print the usage and exit 0, so a script's typo
// passes).
func strictHelp(root *cobra.Command) {
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 || (target == root && len(args) > 0) {
				return engine.UsageErrorf("unknown help topic %q: 'collbench --help' lists the commands", strings.Join(args, " "))
			}
			return target.Help()
		},
	})
	root.InitDefaultCompletionCmd()
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		comp.Args = cobra.ArbitraryArgs
		comp.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return engine.UsageErrorf("completion %s: collbench completes bash, zsh, fish and powershell", args[0])
			}
			return c.Help()
		}
	}
}

// checkGivenFlags refuses a flag given with an empty value (--sizes ”):
// left out, a flag has its default; given empty, it is a mistake that
// would otherwise silently mean the default.
func checkGivenFlags(cmd *cobra.Command) error {
	var bad error
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if bad != nil {
			return
		}
		if err := checkLeast(cmd, fl); err != nil {
			bad = err
			return
		}
		switch fl.Value.Type() {
		case "string", "stringSlice", "stringArray":
		default:
			return
		}
		if v := strings.Trim(fl.Value.String(), "[] \t"); v == "" {
			def := ""
			if fl.DefValue != "" && fl.DefValue != "[]" {
				def = fmt.Sprintf(" (default %s)", fl.DefValue)
			}
			bad = engine.UsageErrorf("--%s is empty: give it a value, or leave it out for its default%s (see '%s --help')", fl.Name, def, cmd.CommandPath())
		}
	})
	return bad
}

// Run executes args against a fresh command tree and returns the exit code,
// printing any error as one line on f.IO.ErrOut.
func Run(ctx context.Context, f *Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	f.Args = append([]string{"collbench"}, args...)
	// An error before the command itself started is Cobra's: an unknown
	// command or flag, a flag value that does not parse, the wrong number
	// of arguments, flags that cannot go together. Those are usage errors;
	// any error after is classified by its type, and one that no type
	// claims is a failed run.
	started := false
	var mark func(c *cobra.Command)
	mark = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				started = true
				return run(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			mark(sub)
		}
	}
	mark(root)
	err := root.ExecuteContext(ctx)
	if err != nil && !started && !isClassified(err) {
		err = &engine.UsageError{Err: err}
	}
	// A signal that stopped the wait for an input file (a named pipe
	// nobody writes) ends with the signal's code, whatever the reader
	// made of the error.
	if engine.StoppedReading(err) {
		err = bySignal(ctx, err)
	}
	if err != nil && err.Error() != "" {
		msg := err.Error()
		// One line, in collbench's words: Go's "context canceled" means the
		// run was stopped, "deadline exceeded" that a bound ran out.
		msg = strings.Join(strings.Fields(tidyCobra(msg)), " ")
		msg = strings.ReplaceAll(msg, "context canceled", "stopped")
		msg = strings.ReplaceAll(msg, "context deadline exceeded", "its time limit ran out")
		fmt.Fprintf(f.IO.ErrOut, "collbench: %s\n", msg)
	}
	f.writeLaunchReport(err)
	return engine.ExitCode(err)
}

// isClassified reports whether err carries its exit code by type.
func isClassified(err error) bool {
	var ue *engine.UsageError
	return errors.As(err, &ue) || engine.ExitCode(err) != engine.ExitRunFailed
}

// Main runs collbench with the process's streams and signals. The first
// SIGINT or SIGTERM stops the run promptly, keeping what it measured; a
// second one exits at once (rows already measured are on disk).
func Main(args []string) int { return MainWith(NewFactory(SystemIO()), args) }

// MainWith is Main with the factory given (a test's fake machine).
func MainWith(f *Factory, args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		first := <-sigs
		cancel(&engine.SignalCause{Sig: first})
		code := engine.ExitInterrupted
		if first == syscall.SIGTERM {
			code = engine.ExitTerminated
		}
		grace := time.NewTimer(engine.SignalGrace)
		select {
		case second := <-sigs:
			fmt.Fprintf(os.Stderr, "collbench: %v again: exiting now\n", second)
			if second == syscall.SIGTERM {
				code = engine.ExitTerminated
			}
		case <-grace.C:
			// Something did not stop when asked (a library call stuck on a
			// GPU, an abort that never returns): say what, and leave.
			stuck := engine.StuckNow()
			if stuck != "" {
				stuck = " (" + stuck + ")"
			}
			msg := fmt.Sprintf("%v: collbench did not stop within %v; exiting", first, engine.SignalGrace)
			if engine.Guarded() {
				msg = fmt.Sprintf("%v: the run did not stop within %v%s; exiting, the rows measured are on disk", first, engine.SignalGrace, stuck)
			}
			fmt.Fprintf(os.Stderr, "collbench: %s\n", msg)
			engine.ExitBecause(code, msg)
		}
		engine.ExitNow(code)
	}()
	f.OwnsProcess = true
	code := Run(ctx, f, args)
	engine.CloseWatch() // the last summaries of a watched run
	return code
}
