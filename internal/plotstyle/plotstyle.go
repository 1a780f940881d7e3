// Package plotstyle is how collbench's pages draw series: a palette safe
// for colour-blind readers (Okabe and Ito's eight colours), a marker shape
// per series so print in grey still tells them apart, and the legend a page
// writes below a plot, outside its data.
package plotstyle

import (
	"fmt"
	"html/template"
	"image/color"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Colors are the series colours, in order.
var Colors = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255}, color.RGBA{204, 121, 167, 255},
	color.RGBA{86, 180, 233, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{0, 0, 0, 255}, color.RGBA{240, 228, 66, 255},
}

// Shapes are the series' marker shapes, in order.
var Shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
	draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}

// Symbols are Shapes as text, for a legend written in HTML.
var Symbols = []string{"●", "□", "△", "×", "+", "○", "■", "▲"}

// Color is series i's colour.
func Color(i int) color.Color { return Colors[i%len(Colors)] }

// Shape is series i's marker. Shapes cycle on a different period from the
// colours, so series 8 and 0 differ in shape.
func Shape(i int) draw.GlyphDrawer { return Shapes[(i+i/len(Colors))%len(Shapes)] }

// Entry is one series of a plot as a page's legend shows it.
type Entry struct {
	Name, Symbol string
	Color        template.CSS
	Dashed       bool
}

// EntryOf is series i's legend entry.
func EntryOf(i int, name string, dashed bool) Entry {
	r, g, b, _ := Color(i).RGBA()
	sym := Symbols[(i+i/len(Colors))%len(Symbols)]
	return Entry{Name: name, Symbol: sym, Color: template.CSS(fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)), Dashed: dashed} //nolint:gosec // G203: a colour we format from numbers
}

// Series is the i-th series of a plot through xys: a line and its markers
// in the i-th colour and shape.
func Series(xys plotter.XYer, i int) (*plotter.Line, *plotter.Scatter, error) {
	line, dots, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, nil, err
	}
	c := Color(i)
	line.Color, dots.Color = c, c
	dots.Shape = Shape(i)
	dots.Radius = vg.Points(3)
	return line, dots, nil
}
