package nccl

import (
	"encoding/binary"

	"collbench/cuda"
	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
)

func (r *rank) grid(count int64) (uint32, uint32) {
	const block = 256
	blocks := (count + block - 1) / block
	limit := int64(max(r.dev.sms, 1) * 16)
	return uint32(min(max(blocks, 1), limit)), block //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

func (r *rank) Fill(dst measure.View, count int64, p measure.Pattern) error {
	if count == 0 {
		return nil
	}
	ptr, err := r.addr(dst, count*int64(p.DType.Size()))
	if err != nil {
		return err
	}
	d := p.Domain
	if r.kernelErr != nil || d.Kind == measure.DomainRandom {
		return r.fillViaHost(ptr, count, p) // the kernel draws exact domains only
	}
	g, b := r.grid(count)
	return r.drv.Launch(r.fill, g, b, r.stream, ptr, uint64(count), int32(p.DType), int32(d.Kind), //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		d.Lo, d.Hi, b2i(d.Signed), p.Seed, int32(p.Ranks), int32(p.Rank)) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
}

func (r *rank) fillViaHost(ptr cuda.DevPtr, count int64, p measure.Pattern) error {
	if err := r.syncStream(); err != nil {
		return err
	}
	esz := int64(p.DType.Size())
	buf := make([]byte, min(count*esz, hostChunk))
	per := int64(len(buf)) / esz
	for first := int64(0); first < count; first += per {
		n := min(per, count-first)
		p.FillRange(buf, first, n)
		if err := r.drv.CopyToDevice(ptr+cuda.DevPtr(first*esz), buf[:n*esz]); err != nil { //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
			return err
		}
	}
	return nil
}

func (r *rank) Poison(dst measure.View, count int64, t dtype.DType) error {
	bytes := count * int64(t.Size())
	ptr, err := r.addr(dst, bytes)
	if err != nil {
		return err
	}
	v := byte(0x80)
	if t.IsFloat() {
		v = 0xff
	}
	return r.drv.MemsetAsync(ptr, v, bytes, r.stream)
}

func (r *rank) Check(src measure.View, e measure.Expectation) (int64, error) {
	count := e.OutputCount()
	if count == 0 {
		return 0, nil
	}
	ptr, err := r.addr(src, count*int64(e.DType.Size()))
	if err != nil {
		return 0, err
	}
	if r.kernelErr != nil {
		return r.checkViaHost(ptr, count, e)
	}
	if err := r.drv.MemsetAsync(r.counter, 0, 8, r.stream); err != nil {
		return 0, err
	}
	_, tol := e.Want(0)
	d, g := e.Domain, e.Geom
	gr, bl := r.grid(count)
	err = r.drv.Launch(r.check, gr, bl, r.stream, ptr, uint64(count), int32(e.DType), int32(e.Coll), int32(e.Op), //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		int32(e.Root), int32(e.Rank), g.SendCount, g.Count, g.RecvCount, //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		int32(d.Kind), d.Lo, d.Hi, b2i(d.Signed), e.Seed, int32(e.Ranks), tol, r.counter) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
	if err != nil {
		return 0, err
	}
	if err := r.syncStream(); err != nil {
		return 0, err
	}
	var out [8]byte
	if err := r.drv.CopyToHost(out[:], r.counter); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(out[:])), nil //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
}

// FindMismatches copies e's output back in bounded chunks and lists up to
// limit wrong elements.
func (r *rank) FindMismatches(src measure.View, e measure.Expectation, limit int) ([]results.Mismatch, error) {
	count := e.OutputCount()
	ptr, err := r.addr(src, count*int64(e.DType.Size()))
	if err != nil {
		return nil, err
	}
	if err := r.syncStream(); err != nil {
		return nil, err
	}
	esz := int64(e.DType.Size())
	buf := make([]byte, min(count*esz, hostChunk))
	per := int64(len(buf)) / esz
	var out []results.Mismatch
	for first := int64(0); first < count && len(out) < limit; first += per {
		n := min(per, count-first)
		if err := r.drv.CopyToHost(buf[:n*esz], ptr+cuda.DevPtr(first*esz)); err != nil { //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
			return nil, err
		}
		out = append(out, e.FindMismatches(buf, first, n, limit-len(out))...)
	}
	return out, nil
}

func (r *rank) checkViaHost(ptr cuda.DevPtr, count int64, e measure.Expectation) (int64, error) {
	if err := r.syncStream(); err != nil {
		return 0, err
	}
	esz := int64(e.DType.Size())
	buf := make([]byte, min(count*esz, hostChunk))
	per := int64(len(buf)) / esz
	var wrong int64
	for first := int64(0); first < count; first += per {
		n := min(per, count-first)
		if err := r.drv.CopyToHost(buf[:n*esz], ptr+cuda.DevPtr(first*esz)); err != nil { //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
			return 0, err
		}
		wrong += e.CountWrong(buf, first, n)
	}
	return wrong, nil
}
