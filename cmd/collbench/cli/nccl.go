package cli

import (
	"os"

	"collbench/backend/nccl"
	"collbench/measure"
)

// loadNCCL loads the NCCL backend. NVLink SHARP (multicast) stays off unless
// the environment already says otherwise: NCCL_NVLS_ENABLE=0 is set before
// NCCL reads its environment.
func loadNCCL(lib string) (measure.Backend, error) {
	if _, ok := os.LookupEnv("NCCL_NVLS_ENABLE"); !ok {
		_ = os.Setenv("NCCL_NVLS_ENABLE", "0")
	}
	b, err := nccl.Open(nccl.Options{Lib: lib})
	if err != nil {
		return nil, err
	}
	return b, nil
}
