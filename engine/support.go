package engine

import (
	mpib "collbench/backend/mpi"
	"collbench/backend/nccl"
	"collbench/measure"
)

// SupportMatrices says what every backend runs, per buffer, collective and
// dtype: the cpu backend on host memory; NCCL on GPU memory, by the rules of
// the library loaded here (or of the newest NCCL where none loads); MPI on
// host memory, and why not on GPU memory.
func (f *System) SupportMatrices(ncclLib string) []measure.SupportMatrix {
	var out []measure.SupportMatrix
	if cb, err := f.CPUBackend(); err == nil {
		out = append(out, measure.BuildSupport("cpu", "host", "", cb.Supports, nil))
	}
	if nb, err := f.OpenNCCL(ncclLib); err == nil {
		out = append(out, measure.BuildSupport("nccl", "device", "NCCL "+nb.Info().Version+" loaded here", nb.Supports, nil))
	} else {
		out = append(out, measure.BuildSupport("nccl", "device", "no NCCL loaded here: the rules of NCCL 2.24+ on compute capability 9.0+", nccl.NewestSupports, nil))
	}
	return append(out, mpib.Matrices(mpib.DeviceNote())...)
}
