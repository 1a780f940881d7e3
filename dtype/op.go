package dtype

import (
	"fmt"
	"strings"
)

// ReduceOp is a reduction operation.
type ReduceOp int

// The reduction operations, in NCCL's order. NoOp marks collectives without one.
const (
	Sum ReduceOp = iota
	Prod
	Max
	Min
	Avg
	numOps
	NoOp ReduceOp = -1
)

var opNames = [numOps]string{"sum", "prod", "max", "min", "avg"}

// AllOps returns every reduction operation.
func AllOps() []ReduceOp { return []ReduceOp{Sum, Prod, Max, Min, Avg} }

// ParseOp accepts an operation's name, case-insensitively.
func ParseOp(s string) (ReduceOp, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for i, n := range opNames {
		if k == n {
			return ReduceOp(i), nil
		}
	}
	return 0, fmt.Errorf("unknown op %q (valid: %s, or all)", s, strings.Join(opNames[:], ", "))
}

// String returns the operation's name, or "none" for NoOp.
func (o ReduceOp) String() string {
	if o == NoOp {
		return "none"
	}
	if o < 0 || o >= numOps {
		return fmt.Sprintf("op(%d)", int(o))
	}
	return opNames[o]
}
