package dtype

import (
	"encoding/binary"
	"fmt"
)

// Bits is element i of buf (little-endian) as its raw bits.
func (t DType) Bits(buf []byte, i int64) uint64 {
	sz := int64(t.Size())
	e := buf[i*sz : (i+1)*sz]
	switch sz {
	case 1:
		return uint64(e[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(e))
	case 4:
		return uint64(binary.LittleEndian.Uint32(e))
	}
	return binary.LittleEndian.Uint64(e)
}

// FirstDiff is the first element at which a and b differ, over their
// common length, and the XOR of its bits in each; -1 where they agree.
func (t DType) FirstDiff(a, b []byte) (int64, uint64) {
	n := int64(min(len(a), len(b)) / t.Size())
	for i := int64(0); i < n; i++ {
		if x, y := t.Bits(a, i), t.Bits(b, i); x != y {
			return i, x ^ y
		}
	}
	return -1, 0
}

// Hex writes bits of one element (its Bits, or two elements' XORed) in
// hexadecimal of t's width: 0x00000001 for a float.
func (t DType) Hex(bits uint64) string { return fmt.Sprintf("0x%0*x", 2*t.Size(), bits) }
