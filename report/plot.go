package report

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"collbench/internal/plotstyle"
	"collbench/internal/words"
	"collbench/results"
)

// Series is one labelled result document for plotting.
type Series struct {
	Label string
	Doc   *results.Document
	// Path is the file the document was read from, shown in full where a
	// page names its runs (Label is the short name).
	Path string
}

// PlotKinds are the plots collbench draws.
var PlotKinds = []string{"busbw", "time", "groups"}

type point struct{ size, v float64 }

func seriesPoints(d *results.Document, coll string, maxSize int64, value func(*results.Half) float64) map[string][]point {
	out := map[string][]point{}
	for _, r := range d.Results {
		if r.Collective != coll || r.SizeBytes <= 0 || (maxSize > 0 && r.SizeBytes > maxSize) {
			continue
		}
		for _, m := range []struct {
			name string
			h    *results.Half
		}{{"out-of-place", r.OutOfPlace}, {"in-place", r.InPlace}} {
			if m.h != nil {
				out[m.name] = append(out[m.name], point{float64(r.SizeBytes), value(m.h)})
			}
		}
	}
	return out
}

// log2Ticks labels a log2 size axis with binary units.
type log2Ticks struct{}

func (log2Ticks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log2(math.Max(min, 1))); math.Pow(2, e) <= max*1.0001; e++ {
		v := math.Pow(2, e)
		label := ""
		if int(e)%3 == 0 {
			label = words.Bytes(int64(v))
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// Plot draws one kind of plot of one collective over several documents
// (baseline and current overlaid), with its legend drawn in the picture.
// Kinds: busbw (bus bandwidth vs size, log x; algorithm bandwidth when
// every row is of one rank, where bus bandwidth means nothing), time (time
// vs size up to 1 MiB), groups (per-group busbw bars at the largest size).
func Plot(kind, coll string, series []Series) (*plot.Plot, error) {
	d, err := drawPlot(kind, coll, series)
	if err != nil {
		return nil, err
	}
	for i, e := range d.entries {
		d.plot.Legend.Add(e.Name, d.thumbs[i]...)
	}
	return d.plot, nil
}

// drawn is a plot with its legend kept apart, for a page that writes the
// legend outside the data, and a note on what the plot shows instead.
type drawn struct {
	plot    *plot.Plot
	entries []plotstyle.Entry
	thumbs  [][]plot.Thumbnailer
	note    string
}

// oneRank says whether every row of coll is of one rank.
func oneRank(series []Series, coll string) bool {
	n := 0
	for _, s := range series {
		for _, r := range s.Doc.Results {
			if r.Collective != coll {
				continue
			}
			ranks := r.Ranks
			if ranks == 0 {
				ranks = s.Doc.Config.Ranks
			}
			if ranks != 1 {
				return false
			}
			n++
		}
	}
	return n > 0
}

// drawPlot draws the series of one collective as the kind of plot asked
// (busbw or time against size, or per-group bars).
func drawPlot(kind, coll string, series []Series) (*drawn, error) {
	p := plot.New()
	p.Legend.Top = true
	p.Legend.Left = true
	d := &drawn{plot: p}
	switch kind {
	case "busbw", "time":
		maxSize := int64(0)
		value := func(h *results.Half) float64 { return h.BusBW }
		p.Title.Text = coll + ": bus bandwidth"
		p.Y.Label.Text = "busbw (GB/s)"
		p.Y.Min = 0 // a drop shows in proportion
		if kind == "busbw" && oneRank(series, coll) {
			value = func(h *results.Half) float64 { return h.AlgBW }
			p.Title.Text = coll + ": algorithm bandwidth (one rank)"
			p.Y.Label.Text = "algbw (GB/s)"
			d.note = "One rank: bus bandwidth has no meaning (nothing crosses a link), so this plot shows algorithm bandwidth, the bytes over the time."
		}
		if kind == "time" {
			maxSize = 1 << 20
			value = func(h *results.Half) float64 { return h.TimeUS }
			p.Title.Text = coll + ": time, small messages"
			p.Y.Label.Text = "time (us)"
		}
		p.X.Label.Text = "size"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = log2Ticks{}
		n := 0
		for _, s := range series {
			pts := seriesPoints(s.Doc, coll, maxSize, value)
			modes := make([]string, 0, len(pts))
			for m := range pts {
				modes = append(modes, m)
			}
			sort.Strings(modes)
			for _, m := range modes {
				xy := make(plotter.XYs, len(pts[m]))
				sort.Slice(pts[m], func(a, b int) bool { return pts[m][a].size < pts[m][b].size })
				for i, pt := range pts[m] {
					xy[i].X, xy[i].Y = pt.size, pt.v
				}
				line, dots, err := plotstyle.Series(xy, n)
				if err != nil {
					return nil, err
				}
				dashed := m == "in-place"
				if dashed {
					line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(line, dots)
				d.entries = append(d.entries, plotstyle.EntryOf(n, s.Label+" "+m, dashed))
				d.thumbs = append(d.thumbs, []plot.Thumbnailer{line, dots})
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("no %s rows to plot", coll)
		}
	case "groups":
		p.Title.Text = coll + ": bus bandwidth per group"
		p.Y.Label.Text = "busbw (GB/s)"
		var names []string
		w := vg.Points(12)
		n := 0
		for si, s := range series {
			var last *results.Row
			for i := range s.Doc.Results {
				r := &s.Doc.Results[i]
				if r.Collective == coll && len(r.Groups) > 0 && (last == nil || r.SizeBytes >= last.SizeBytes) {
					last = r
				}
			}
			if last == nil {
				continue
			}
			var vals plotter.Values
			names = names[:0]
			for _, g := range last.Groups {
				v := 0.0
				if g.OutOfPlace != nil {
					v = g.OutOfPlace.BusBW
				}
				vals = append(vals, v)
				names = append(names, fmt.Sprintf("g%d %s", g.ID, words.GroupExact(g.Ranks)))
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return nil, err
			}
			bars.Color = plotstyle.Color(si)
			bars.Offset = vg.Length(si) * w
			p.Add(bars)
			d.entries = append(d.entries, plotstyle.EntryOf(si, fmt.Sprintf("%s %s", s.Label, words.Bytes(last.SizeBytes)), false))
			d.thumbs = append(d.thumbs, []plot.Thumbnailer{bars})
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("no %s rows with groups to plot", coll)
		}
		p.NominalX(names...)
	default:
		return nil, fmt.Errorf("unknown plot kind %q (valid: busbw, time, groups)", kind)
	}
	return d, nil
}

// The size of a plot on a page: the page scales it to its width.
const (
	plotWidth  = 7 * vg.Inch
	plotHeight = 4 * vg.Inch
)

// WritePlot renders p as svg or png.
func WritePlot(w io.Writer, p *plot.Plot, format string) error {
	if format != "svg" && format != "png" {
		return fmt.Errorf("unknown plot format %q (valid: svg, png)", format)
	}
	wt, err := p.WriterTo(plotWidth, plotHeight, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// PlotSVG renders a plot to SVG text, or "" when there is nothing to plot.
func PlotSVG(kind, coll string, series []Series) string {
	p, err := Plot(kind, coll, series)
	if err != nil {
		return ""
	}
	var b bytes.Buffer
	if err := WritePlot(&b, p, "svg"); err != nil {
		return ""
	}
	return b.String()
}
