// Command accuracyplot draws test accuracy against epsilon, one line per
// noise mechanism (mean over runs, bars from min to max), from the -json
// results of train run, with published results marked. It writes OUT.png
// and OUT.svg.
//
//	go run ./bench/accuracyplot -out docs/fashion-accuracy results/*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// result is the part of a train run -json file the plot reads.
type result struct {
	Plan *struct {
		Mechanism string  `json:"mechanism"`
		Epsilon   float64 `json:"epsilon"`
		// BandSelection is set when the planner chose the bands
		// (bandmf:auto, toeplitz:auto).
		BandSelection *json.RawMessage `json:"band_selection"`
	} `json:"plan"`
	Final struct {
		Split    string  `json:"split"`
		Accuracy float64 `json:"test_accuracy"`
	} `json:"final"`
}

// published are results on Fashion-MNIST at delta = 1e-5 from the papers.
var published = []struct {
	label    string
	eps, acc float64
}{
	{"Tramèr & Boneh 2021, ScatterNet+linear", 3, 0.897},
	{"Tramèr & Boneh 2021, end-to-end CNN", 3, 0.860},
	{"Papernot et al. 2021, tempered sigmoid CNN", 2.93, 0.861},
}

func main() {
	out := flag.String("out", "fashion-accuracy", "output path without extension (.png and .svg are written)")
	flag.Parse()
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "accuracyplot:", err)
		os.Exit(1)
	}
}

func run(out string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("no result files")
	}
	accs, err := readAccuracies(files)
	if err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "Fashion-MNIST, delta = 1e-5: test accuracy against epsilon"
	p.X.Label.Text = "epsilon"
	p.Y.Label.Text = "test accuracy (%)"
	p.Legend.Top = false
	p.Legend.Left = false
	mechs := make([]string, 0, len(accs))
	for m := range accs {
		mechs = append(mechs, m)
	}
	sort.Strings(mechs)
	for i, m := range mechs {
		if err := addMechanism(p, i, m, accs[m]); err != nil {
			return err
		}
	}
	if err := addPublished(p); err != nil {
		return err
	}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = 0, 9
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(8*vg.Inch, 5.5*vg.Inch, out+ext); err != nil {
			return err
		}
	}
	return nil
}

// readAccuracies reads the result files: accs[mechanism][rounded epsilon]
// are the runs' test accuracies in percent.
func readAccuracies(files []string) (map[string]map[float64][]float64, error) {
	accs := map[string]map[float64][]float64{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		if r.Plan == nil || r.Final.Split != "test" {
			return nil, fmt.Errorf("%s: not a private run evaluated on the test split", f)
		}
		eps := math.Round(r.Plan.Epsilon*100) / 100
		mech := lineName(r.Plan.Mechanism, r.Plan.BandSelection != nil)
		if accs[mech] == nil {
			accs[mech] = map[float64][]float64{}
		}
		accs[mech][eps] = append(accs[mech][eps], 100*r.Final.Accuracy)
	}
	return accs, nil
}

// addMechanism adds mechanism m's line (the i-th): the mean accuracy over
// runs at each epsilon, with bars from the min to the max.
func addMechanism(p *plot.Plot, i int, m string, byEps map[float64][]float64) error {
	pts, errs := meanMinMax(byEps)
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

// meanMinMax is, by increasing epsilon, the mean of the runs' accuracies
// and its distances to their min and max.
func meanMinMax(byEps map[float64][]float64) (plotter.XYs, plotter.YErrors) {
	var epss []float64
	for e := range byEps {
		epss = append(epss, e)
	}
	sort.Float64s(epss)
	pts := make(plotter.XYs, len(epss))
	errs := make(plotter.YErrors, len(epss))
	for k, e := range epss {
		v := byEps[e]
		lo, hi, sum := v[0], v[0], 0.0
		for _, a := range v {
			lo, hi, sum = math.Min(lo, a), math.Max(hi, a), sum+a
		}
		mean := sum / float64(len(v))
		pts[k] = plotter.XY{X: e, Y: mean}
		errs[k] = struct{ Low, High float64 }{mean - lo, hi - mean}
	}
	return pts, errs
}

// addPublished marks the published accuracies.
func addPublished(p *plot.Plot) error {
	for i, pub := range published {
		s, err := plotter.NewScatter(plotter.XYs{{X: pub.eps, Y: 100 * pub.acc}})
		if err != nil {
			return err
		}
		s.Shape = []draw.GlyphDrawer{draw.CrossGlyph{}, draw.PlusGlyph{}, draw.SquareGlyph{}}[i%3]
		s.Color = color.Black
		s.Radius = vg.Points(4)
		p.Add(s)
		p.Legend.Add(pub.label+fmt.Sprintf(" (eps %g)", pub.eps), s)
	}
	return nil
}

// lineName is the line a run belongs to: its mechanism, or KIND:auto for a
// run whose planner chose the bands (bandmf:auto picks bandmf:4 at one
// epsilon and bandmf:8 at another; they are one line).
func lineName(mech string, auto bool) string {
	if !auto {
		return mech
	}
	if i := strings.IndexByte(mech, ':'); i >= 0 {
		return mech[:i] + ":auto"
	}
	// One band: the planner chose DP-SGD.
	return "bandmf:auto"
}
