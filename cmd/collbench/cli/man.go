package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"collbench/engine"
)

// NewCmdMan builds the hidden `collbench man --dir DIR`, which writes one
// man page per command (collbench.1, collbench-allreduce.1, ...) from the
// command tree itself; `make man` runs it.
func NewCmdMan(f *Factory) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Write collbench's man pages to DIR",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // man pages are for every user to read
				return engine.UsageErrorf("cannot create --dir %s: %v", dir, err)
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			header := &doc.GenManHeader{Title: "COLLBENCH", Section: "1", Source: "collbench " + Version, Manual: "collbench manual"}
			if err := doc.GenManTree(root, header, dir); err != nil {
				return &engine.RunError{Err: fmt.Errorf("writing man pages to %s: %v", dir, err)}
			}
			entries, _ := os.ReadDir(dir)
			fmt.Fprintf(f.IO.ErrOut, "collbench: %d man pages in %s (man -l %s/collbench.1)\n", len(entries), dir, dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write the pages to")
	return cmd
}
