package watch

import "math"

// KernelOp is what a profiler plugin saw of one operation on one rank:
// when the rank handed it to NCCL (IssueNS, the host's clock), its
// kernel's first channel start and last channel stop on the GPU's own
// timer, and SeenMinusGPU, the least of (host time at which NCCL's proxy
// reported a channel's start or stop) minus (that GPU time).
type KernelOp struct {
	Seq               uint64
	IssueNS           int64
	GPUStart, GPUStop int64
	SeenMinusGPU      int64
}

// Aligner maps one GPU's timer onto its host's clock from the operations
// themselves: a kernel starts after it was issued, and the proxy reports
// each channel's start and stop after they happened, so each operation
// bounds the offset (host minus GPU) from both sides: at least IssueNS -
// GPUStart, at most SeenMinusGPU. The bounds of successive operations are
// intersected; when they no longer meet (the timer drifted), they start
// again from the operation at hand.
type Aligner struct {
	lo, hi int64
	set    bool
}

// Place returns op's kernel start and end on the host's clock and the
// error of both (half the width of the offset's bounds). ok is false when
// op bounds nothing (no channel was reported).
func (a *Aligner) Place(op KernelOp) (start, end, errNS int64, ok bool) {
	if op.SeenMinusGPU == math.MaxInt64 || op.GPUStop < op.GPUStart {
		return 0, 0, 0, false
	}
	lo, hi := op.IssueNS-op.GPUStart, op.SeenMinusGPU
	if lo > hi {
		// The two sides disagree (the timer was read on another clock
		// than assumed): the operation says nothing reliable.
		return 0, 0, 0, false
	}
	switch {
	case !a.set || lo > a.hi || hi < a.lo:
		a.lo, a.hi, a.set = lo, hi, true
	default:
		a.lo, a.hi = max(a.lo, lo), min(a.hi, hi)
	}
	off := a.lo + (a.hi-a.lo)/2
	return op.GPUStart + off, op.GPUStop + off, (a.hi - a.lo + 1) / 2, true
}
