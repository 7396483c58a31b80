// Package accplot draws accuracy against epsilon: one line per noise
// mechanism (or mechanism and sampling), the mean over runs with bars from
// the min to the max, and published results as marks. bench/accuracyplot
// and train sweep draw with it.
package accplot

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Mark is a published result: its source, epsilon and accuracy (a
// fraction).
type Mark struct {
	Label    string  `json:"label"`
	Epsilon  float64 `json:"epsilon"`
	Accuracy float64 `json:"accuracy"`
}

// ReadMarks reads a JSON array of marks ([{"label": ..., "epsilon": ...,
// "accuracy": ...}]), refusing one without a label or with an epsilon or
// accuracy out of range.
func ReadMarks(path string) ([]Mark, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("accplot: marks: %w", err)
	}
	var ms []Mark
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("accplot: marks %s: want a JSON array of {label, epsilon, accuracy}: %w", path, err)
	}
	for i, m := range ms {
		if m.Label == "" || !(m.Epsilon > 0) || math.IsInf(m.Epsilon, 0) || !(m.Accuracy >= 0 && m.Accuracy <= 1) {
			return nil, fmt.Errorf("accplot: marks %s: entry %d: want a label, epsilon > 0 and accuracy in [0, 1]", path, i+1)
		}
	}
	return ms, nil
}

// Summary is the mean, min and max of v (NaN for an empty v).
func Summary(v []float64) (mean, lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	lo, hi, sum := v[0], v[0], 0.0
	for _, a := range v {
		lo, hi, sum = math.Min(lo, a), math.Max(hi, a), sum+a
	}
	return sum / float64(len(v)), lo, hi
}

// Lines maps a line's name to its runs' accuracies (in percent) by
// epsilon.
type Lines map[string]map[float64][]float64

// Add records one run of line name at eps.
func (l Lines) Add(name string, eps, acc float64) {
	if l[name] == nil {
		l[name] = map[float64][]float64{}
	}
	l[name][eps] = append(l[name][eps], acc)
}

// New draws the lines (sorted by name) and the marks.
func New(title, yLabel string, lines Lines, marks []Mark) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "epsilon"
	p.Y.Label.Text = yLabel
	p.Legend.Top = false
	p.Legend.Left = false
	names := make([]string, 0, len(lines))
	for m := range lines {
		names = append(names, m)
	}
	sort.Strings(names)
	maxEps := 0.0
	for i, m := range names {
		if err := addLine(p, i, m, lines[m]); err != nil {
			return nil, err
		}
		for e := range lines[m] {
			maxEps = math.Max(maxEps, e)
		}
	}
	for i, pub := range marks {
		s, err := plotter.NewScatter(plotter.XYs{{X: pub.Epsilon, Y: 100 * pub.Accuracy}})
		if err != nil {
			return nil, err
		}
		s.Shape = []draw.GlyphDrawer{draw.CrossGlyph{}, draw.PlusGlyph{}, draw.SquareGlyph{}}[i%3]
		s.Color = color.Black
		s.Radius = vg.Points(4)
		p.Add(s)
		p.Legend.Add(pub.Label+fmt.Sprintf(" (eps %g)", pub.Epsilon), s)
		maxEps = math.Max(maxEps, pub.Epsilon)
	}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = 0, math.Ceil(maxEps*1.1)
	return p, nil
}

// addLine adds line m (the i-th): the mean accuracy over runs at each
// epsilon, with bars from the min to the max.
func addLine(p *plot.Plot, i int, m string, byEps map[float64][]float64) error {
	var epss []float64
	for e := range byEps {
		epss = append(epss, e)
	}
	sort.Float64s(epss)
	pts := make(plotter.XYs, len(epss))
	errs := make(plotter.YErrors, len(epss))
	for k, e := range epss {
		mean, lo, hi := Summary(byEps[e])
		pts[k] = plotter.XY{X: e, Y: mean}
		errs[k] = struct{ Low, High float64 }{mean - lo, hi - mean}
	}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
	points.Shape = plotutil.Shape(i)
	bars, err := plotter.NewYErrorBars(struct {
		plotter.XYer
		plotter.YErrorer
	}{pts, errs})
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(i)
	p.Add(line, points, bars)
	p.Legend.Add(m+" (mean over runs, bar min to max)", line, points)
	return nil
}
