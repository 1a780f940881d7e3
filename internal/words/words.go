// Package words is how collbench writes numbers for people: byte counts,
// lists of ranks, and missing values, the same way in every report.
package words

import (
	"fmt"
	"strconv"
	"strings"
)

var (
	binaryUnits = []string{"TiB", "GiB", "MiB", "KiB"}
	sizeUnits   = []string{"T", "G", "M", "K"}
	shifts      = []uint{40, 30, 20, 10}
)

// Bytes writes b exactly, in the largest binary unit that divides it:
// "8 B", "1 KiB", "3 MiB", "1536 B".
func Bytes(b int64) string {
	for i, s := range shifts {
		if b >= 1<<s && b%(1<<s) == 0 {
			return fmt.Sprintf("%d %s", b>>s, binaryUnits[i])
		}
	}
	return fmt.Sprintf("%d B", b)
}

// BytesApprox writes b to one decimal in the largest binary unit not above
// it: "8 B", "1.0 KiB", "1.5 KiB".
func BytesApprox(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

// SizeArg writes b as a --sizes value collbench reads back: "8", "1K",
// "64M", "1536".
func SizeArg(b int64) string {
	for i, s := range shifts {
		if b >= 1<<s && b%(1<<s) == 0 {
			return fmt.Sprintf("%d%s", b>>s, sizeUnits[i])
		}
	}
	return strconv.FormatInt(b, 10)
}

// Ints writes a list of numbers (ranks, GPUs): "0, 2, 5".
func Ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// OrDash writes s, or "-" when it is empty (a cell with nothing to say).
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
