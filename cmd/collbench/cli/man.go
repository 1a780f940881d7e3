package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"collbench/engine"
)

// ManOptions are what `collbench man` needs: where to write, and the
// command tree to write pages for.
type ManOptions struct {
	IO   *IOStreams
	Dir  string
	Root *cobra.Command
}

// NewCmdMan builds the hidden `collbench man --dir DIR`, which writes one
// man page per command (collbench.1, collbench-allreduce.1, ...) from the
// command tree itself; `make man` runs it.
func NewCmdMan(f *Factory, runF func(*ManOptions) error) *cobra.Command {
	o := &ManOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Write collbench's man pages to DIR",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Root = cmd.Root()
			if runF != nil {
				return runF(o)
			}
			return manRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Dir, "dir", "man", "directory to write the pages to")
	return cmd
}

func manRun(o *ManOptions) error {
	dir := o.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // man pages are for every user to read
		return engine.UsageErrorf("cannot create --dir %s: %v", dir, err)
	}
	root := o.Root
	root.DisableAutoGenTag = true
	header := &doc.GenManHeader{Title: "COLLBENCH", Section: "1", Source: "collbench " + Version, Manual: "collbench manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return &engine.RunError{Err: fmt.Errorf("writing man pages to %s: %v", dir, err)}
	}
	entries, _ := os.ReadDir(dir)
	fmt.Fprintf(o.IO.ErrOut, "collbench: %d man pages in %s (man -l %s/collbench.1)\n", len(entries), dir, dir)
	return nil
}
