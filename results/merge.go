package results

import "slices"

// Clone copies d's top level and its rows slice, so merging into the copy
// leaves d as it was; a nil d clones to nil.
func (d *Document) Clone() *Document {
	if d == nil {
		return nil
	}
	c := *d
	c.Results = append([]Row(nil), d.Results...)
	c.Config.Collectives = append([]string(nil), d.Config.Collectives...)
	return &c
}

// Merge appends b's rows to a (a nil a starts with a copy of b) and
// returns a, its summary brought up to date.
func Merge(a, b *Document) *Document {
	if a == nil {
		c := *b
		return &c
	}
	a.Results = append(a.Results, b.Results...)
	for _, c := range b.Config.Collectives {
		if !slices.Contains(a.Config.Collectives, c) {
			a.Config.Collectives = append(a.Config.Collectives, c)
		}
	}
	a.Config.RankList, a.Config.Groups = "", nil
	a.Finished = b.Finished
	if a.Error == "" {
		a.Error = b.Error
	}
	a.Summary = Summarize(a.Results, a.Error != "")
	return a
}
