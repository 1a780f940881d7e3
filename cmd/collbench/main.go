// Command collbench benchmarks and verifies collective communication.
package main

import (
	"os"

	"collbench/cmd/collbench/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
