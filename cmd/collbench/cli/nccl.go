package cli

import (
	"errors"

	"collbench/suites"
)

// openNCCL loads the NCCL backend.
func openNCCL(lib string) (suites.Backend, error) {
	return nil, errors.New("this build has no NCCL backend")
}
