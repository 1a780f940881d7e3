package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// VersionOptions are what `collbench version` needs.
type VersionOptions struct{ IO *IOStreams }

// NewCmdVersion builds `collbench version`. runF replaces versionRun in
// tests.
func NewCmdVersion(f *Factory, runF func(*VersionOptions) error) *cobra.Command {
	o := &VersionOptions{IO: f.IO}
	return &cobra.Command{
		Use:   "version",
		Short: "Print collbench's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return versionRun(o)
		},
	}
}

func versionRun(o *VersionOptions) error {
	_, err := fmt.Fprintln(o.IO.Out, versionLine())
	return err
}

// versionLine is what `collbench version` and `collbench --version` print.
func versionLine() string {
	return fmt.Sprintf("collbench %s (%s, %s/%s)", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
