package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// NewCmdVersion builds `collbench version`.
func NewCmdVersion(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print collbench's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(f.IO.Out, versionLine())
			return nil
		},
	}
}

// versionLine is what `collbench version` and `collbench --version` print.
func versionLine() string {
	return fmt.Sprintf("collbench %s (%s, %s/%s)", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
