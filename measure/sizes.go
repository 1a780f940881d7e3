package measure

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxSize bounds a single message size (1 TiB), far above any GPU's memory.
const MaxSize = int64(1) << 40

// ParseSize parses a byte count with an optional binary suffix: 8, 1K, 64M,
// 8G, 1T, also written 1KB, 1KiB (all powers of 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size (use a byte count such as 8, 1K, 64M or 8G)")
	}
	up := strings.ToUpper(t)
	up = strings.TrimSuffix(up, "IB")
	up = strings.TrimSuffix(up, "B")
	mult := int64(1)
	if n := len(up); n > 0 {
		switch up[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			up = up[:n-1]
		}
	}
	if strings.HasSuffix(strings.ToUpper(t), "IB") && mult == 1 {
		return 0, fmt.Errorf("invalid size %q (use a byte count such as 8, 1K, 64M or 8G)", s)
	}
	v, err := strconv.ParseFloat(up, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strings.ContainsAny(up, "eExXpP_") {
		return 0, fmt.Errorf("invalid size %q (use a byte count such as 8, 1K, 64M or 8G)", s)
	}
	if v <= 0 {
		return 0, fmt.Errorf("invalid size %q: sizes must be positive", s)
	}
	b := v * float64(mult)
	if b != math.Trunc(b) {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	if b > float64(MaxSize) {
		return 0, fmt.Errorf("invalid size %q: larger than the 1T limit", s)
	}
	return int64(b), nil
}

// ParseSizes parses a comma-separated list of sizes and ranges:
//
//	8,1K,1M       a list
//	8:1G          doubling from 8 B to 1 GiB
//	1M:64M:x4     multiplying by 4
//	1M:8M:+1M     adding 1 MiB
//
// The result keeps the given order. A size listed twice, by any spelling or
// by overlapping ranges, is refused: it would measure the same row twice.
func ParseSizes(spec string) ([]int64, error) {
	var out []int64
	seen := map[int64]string{}
	var dup error
	add := func(v int64, item string) {
		if first, ok := seen[v]; ok {
			if dup == nil {
				by := fmt.Sprintf("by %q and %q", first, item)
				if first == item {
					by = fmt.Sprintf("twice by %q", item)
				}
				dup = fmt.Errorf("invalid sizes %q: %d bytes is listed %s; list each size once", spec, v, by)
			}
			return
		}
		seen[v] = item
		out = append(out, v)
	}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("invalid sizes %q: empty item (use e.g. 8,1K,1M or 8:1G)", spec)
		}
		parts := strings.Split(item, ":")
		switch len(parts) {
		case 1:
			v, err := ParseSize(parts[0])
			if err != nil {
				return nil, err
			}
			add(v, item)
		case 2, 3:
			step := "x2"
			if len(parts) == 3 {
				step = parts[2]
			}
			vals, err := expandRange(item, parts[0], parts[1], step)
			if err != nil {
				return nil, err
			}
			for _, v := range vals {
				add(v, item)
			}
		default:
			return nil, fmt.Errorf("invalid size range %q (use START:END, START:END:xF or START:END:+STEP)", item)
		}
	}
	if dup != nil {
		return nil, dup
	}
	return out, nil
}

// maxRangeSteps bounds how many sizes one range may produce.
const maxRangeSteps = 4096

func expandRange(item, a, b, step string) ([]int64, error) {
	lo, err := ParseSize(a)
	if err != nil {
		return nil, err
	}
	hi, err := ParseSize(b)
	if err != nil {
		return nil, err
	}
	if lo > hi {
		return nil, fmt.Errorf("invalid size range %q: start %d is larger than end %d", item, lo, hi)
	}
	step = strings.TrimSpace(step)
	var vals []int64
	switch {
	case strings.HasPrefix(step, "x") || strings.HasPrefix(step, "*"):
		f, err := strconv.ParseInt(step[1:], 10, 64)
		if err != nil || f < 2 {
			return nil, fmt.Errorf("invalid size range %q: factor %q must be an integer of at least 2 (e.g. x2)", item, step)
		}
		for v := lo; v <= hi; v *= f {
			vals = append(vals, v)
			if v > hi/f {
				break
			}
		}
	case strings.HasPrefix(step, "+"):
		inc, err := ParseSize(step[1:])
		if err != nil {
			return nil, fmt.Errorf("invalid size range %q: step %q: %v", item, step, err)
		}
		if (hi-lo)/inc >= maxRangeSteps {
			return nil, fmt.Errorf("invalid size range %q: more than %d sizes", item, maxRangeSteps)
		}
		for v := lo; v <= hi; v += inc {
			vals = append(vals, v)
		}
	default:
		return nil, fmt.Errorf("invalid size range %q: step %q must be xF (factor) or +N (increment)", item, step)
	}
	return vals, nil
}

// SizesFromBounds builds the list NCCL's benchmark flags describe: -b MIN
// -e MAX with either -f FACTOR or -i INCREMENT.
func SizesFromBounds(minB, maxB string, factor int64, incr string) ([]int64, error) {
	step := fmt.Sprintf("x%d", factor)
	if incr != "" {
		step = "+" + incr
	}
	if maxB == "" {
		maxB = minB
	}
	item := minB + ":" + maxB + ":" + step
	return expandRange(item, minB, maxB, step)
}
