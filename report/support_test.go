package report

import (
	"bytes"
	"errors"
	"testing"

	"collbench/dtype"
	"collbench/suites"
)

// TestWriteSupport renders a matrix with every kind of cell (all ops, all
// but avg, a list, data movers as yes and as bytes, unsupported) and a
// matrix with nothing, against testdata/support.golden.
func TestWriteSupport(t *testing.T) {
	rules := func(c suites.Collective, ty dtype.DType, op suites.ReduceOp) error {
		switch {
		case c.Reduces() && ty == dtype.Float16:
			return suites.ErrUnsupported
		case c.Reduces() && ty.IsFP8() && (op == suites.Prod || op == suites.Avg):
			return suites.ErrUnsupported
		case c.Reduces() && ty == dtype.Float64 && op == suites.Avg:
			return errors.Join(suites.ErrUnsupported)
		}
		return nil
	}
	ms := []suites.SupportMatrix{
		suites.BuildSupport("demo", "host", "", rules, func(ty dtype.DType) bool { return ty == dtype.Float16 }),
		suites.BuildSupport("demo", "device", "no GPU memory on this backend", nil, nil),
	}
	var b bytes.Buffer
	if err := WriteSupport(&b, ms); err != nil {
		t.Fatal(err)
	}
	golden(t, "support.golden", b.Bytes())
}
