package report

import (
	"bytes"
	"errors"
	"testing"

	"collbench/internal/golden"

	"collbench/dtype"
	"collbench/measure"
)

// TestWriteSupport renders a matrix with every kind of cell (all ops, all
// but avg, a list, data movers as yes and as bytes, unsupported) and a
// matrix with nothing, against testdata/support.golden.
func TestWriteSupport(t *testing.T) {
	rules := func(c measure.Collective, ty dtype.DType, op measure.ReduceOp) error {
		switch {
		case c.Reduces() && ty == dtype.Float16:
			return measure.ErrUnsupported
		case c.Reduces() && ty.IsFP8() && (op == measure.Prod || op == measure.Avg):
			return measure.ErrUnsupported
		case c.Reduces() && ty == dtype.Float64 && op == measure.Avg:
			return errors.Join(measure.ErrUnsupported)
		}
		return nil
	}
	ms := []measure.SupportMatrix{
		measure.BuildSupport("demo", "host", "", rules, func(ty dtype.DType) bool { return ty == dtype.Float16 }),
		measure.BuildSupport("demo", "device", "no GPU memory on this backend", nil, nil),
	}
	var b bytes.Buffer
	if err := WriteSupport(&b, ms); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "support.golden", b.Bytes())
}
