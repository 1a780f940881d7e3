package measure

import (
	"fmt"
	"strings"

	"collbench/internal/words"
)

// EmptyRows finds rows whose size is below one element per rank, so they
// move no data. If every row is such a row the run is refused; otherwise a
// note says how many (NCCL's benchmark prints them too, with count 0).
func EmptyRows(sizes []int64, cases []Case, minGroup, maxGroup int) (string, error) {
	var empty, total int
	example := ""
	allEmpty := true
	for _, c := range cases {
		for _, sz := range sizes {
			total++
			if GeometryFor(c.Coll, sz, c.DType.Size(), minGroup, 0).BufferElems() > 0 {
				allEmpty = false
			}
			if GeometryFor(c.Coll, sz, c.DType.Size(), maxGroup, 0).BufferElems() == 0 {
				empty++
				if example == "" {
					example = fmt.Sprintf("%s %s %s on %d ranks", c.Coll, c.DType, words.Bytes(sz), maxGroup)
				}
			}
		}
	}
	if total > 0 && allEmpty {
		c := cases[0]
		need := int64(c.DType.Size())
		for GeometryFor(c.Coll, need, c.DType.Size(), minGroup, 0).BufferElems() == 0 {
			need *= 2
		}
		return "", fmt.Errorf("every row would move no data: the sizes are below one %s per rank (%s needs at least %s on %d ranks); use larger --sizes",
			c.DType, c.Coll, words.Bytes(need), minGroup)
	}
	if empty > 0 {
		return fmt.Sprintf("%d of %d rows move no data: their size is below one element per rank (e.g. %s); they are timed with count 0, as NCCL's benchmark does", empty, total, example), nil
	}
	return "", nil
}

// WholeElements checks the plan's sizes against each dtype's element size. A size
// that is not a whole number of elements is measured rounded down, as NCCL's
// benchmark does, and said in a note; two sizes that round to the same
// element count would measure one row twice and are refused.
func (p Plan) WholeElements() (string, error) {
	var odd []string
	more := 0
	for _, t := range p.DTypes {
		es := int64(t.Size())
		if es <= 1 {
			continue
		}
		first := map[int64]int64{}
		for _, sz := range p.Sizes {
			c := sz / es
			if prev, ok := first[c]; ok {
				return "", fmt.Errorf("--sizes %d and %d are both %d %s elements (%d B each), so they would measure the same row; give sizes that are whole %s elements",
					prev, sz, c, t, es, t)
			}
			first[c] = sz
			switch {
			case sz%es == 0:
			case len(odd) < 4:
				odd = append(odd, fmt.Sprintf("%d as %d (%s)", sz, c*es, t))
			default:
				more++
			}
		}
	}
	if len(odd) == 0 {
		return "", nil
	}
	if more > 0 {
		odd = append(odd, fmt.Sprintf("and %d more", more))
	}
	return "sizes that are not a whole number of elements are measured rounded down, as NCCL's benchmark does: " + strings.Join(odd, ", "), nil
}
