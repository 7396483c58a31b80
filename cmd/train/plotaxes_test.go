package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/plot"
)

func labels(ticks []plot.Tick) []string {
	var l []string
	for _, t := range ticks {
		if t.Label != "" {
			l = append(l, t.Label)
		}
	}
	return l
}

// isNice reports whether s is 1, 2 or 5 times a power of ten.
func isNice(s float64) bool {
	k := math.Floor(math.Log10(s) + 1e-9)
	m := s / math.Pow(10, k)
	for _, want := range []float64{1, 2, 5} {
		if math.Abs(m-want) < 1e-9 {
			return true
		}
	}
	return false
}

// TestNiceTicks: the labelled ticks of a linear axis are 3 to 6
// consecutive multiples of a step of 1, 2 or 5 x 10^k inside the range,
// each label its value (issue 39 item 17: gonum's default labels the
// steps 1..300 at 40, 160, 280).
func TestNiceTicks(t *testing.T) {
	for _, r := range [][2]float64{{1, 300}, {0, 300}, {1, 1000}, {0, 0.9}, {0.001, 20}, {1, 7}, {-3, 12}, {0.5, 2.3}, {1, 5000}, {0, 1}} {
		ticks := niceTicks{}.Ticks(r[0], r[1])
		var vals []float64
		for _, tk := range ticks {
			if tk.Value < r[0]-1e-9 || tk.Value > r[1]+1e-9 {
				t.Errorf("%v: tick %v outside the range", r, tk.Value)
			}
			if tk.Label == "" {
				continue
			}
			v, err := strconv.ParseFloat(tk.Label, 64)
			if err != nil || math.Abs(v-tk.Value) > 1e-9*math.Max(1, math.Abs(v)) {
				t.Errorf("%v: label %q at %v", r, tk.Label, tk.Value)
			}
			vals = append(vals, v)
		}
		if len(vals) < 3 || len(vals) > 6 {
			t.Errorf("%v: %d labels %v, want 3 to 6", r, len(vals), labels(ticks))
			continue
		}
		step := vals[1] - vals[0]
		for i := 1; i < len(vals); i++ {
			if d := vals[i] - vals[i-1]; math.Abs(d-step) > 1e-9*step {
				t.Errorf("%v: labels %v not equally spaced", r, labels(ticks))
			}
		}
		if !isNice(step) || math.Abs(vals[0]/step-math.Round(vals[0]/step)) > 1e-9 {
			t.Errorf("%v: labels %v: step %v or start not 1, 2, 5 x 10^k", r, labels(ticks), step)
		}
	}
	// The run plot's step axis over steps 1..300.
	c := &runCurves{}
	for s := 1; s <= 300; s++ {
		c.stepLoss = append(c.stepLoss, struct{ X, Y float64 }{float64(s), 1 / float64(s)})
	}
	plots, err := runPlots("t", c)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range plots {
		if got := labels(p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max)); !slices.Equal(got, []string{"100", "200", "300"}) {
			t.Errorf("panel %d: step axis labelled %v, want 100 200 300", i, got)
		}
	}
}

// rmseRows are compare rows whose per-step RMSEs are f(t), t = 1..n.
func rmseRows(n int, fs map[string]func(t float64) float64) []compareRow {
	var rows []compareRow
	for _, name := range []string{"dpsgd", "tree-online", "fft"} {
		f, ok := fs[name]
		if !ok {
			continue
		}
		r := compareRow{}
		r.Mechanism = name
		for t := 1; t <= n; t++ {
			r.StepRMSE = append(r.StepRMSE, f(float64(t)))
		}
		rows = append(rows, r)
	}
	return rows
}

// TestCompareLogScale: train compare's plot has a logarithmic y axis when
// the RMSEs span more than 1.5 decades (DP-SGD's sqrt(t) against
// factorizations near 1), a linear one when they do not, and what
// -plot-scale asks for; a log axis is labelled at 1, 2, 5 x 10^k and
// leaves out zeros (the file is drawn, not refused).
func TestCompareLogScale(t *testing.T) {
	w, s := dpcore.Workload{}, dpcore.Schema{}
	wide := rmseRows(2000, map[string]func(float64) float64{
		"dpsgd":       math.Sqrt,
		"tree-online": func(t float64) float64 { return 0.5 + math.Log2(t)/20 },
		"fft":         func(t float64) float64 { return map[bool]float64{true: 0, false: 0.6}[t == 1] },
	})
	narrow := rmseRows(2000, map[string]func(float64) float64{
		"tree-online": func(t float64) float64 { return 0.5 + math.Log2(t)/20 },
		"fft":         func(float64) float64 { return 0.7 },
	})
	for _, c := range []struct {
		name  string
		rows  []compareRow
		scale axisScale
		log   bool
	}{
		{"wide auto", wide, scaleAuto, true},
		{"wide linear", wide, scaleLinear, false},
		{"narrow auto", narrow, scaleAuto, false},
		{"narrow log", narrow, scaleLog, true},
	} {
		p, err := rmsePlot(c.rows, w, s, c.scale)
		if err != nil {
			t.Fatal(err)
		}
		_, isLog := p.Y.Scale.(plot.LogScale)
		if isLog != c.log {
			t.Errorf("%s: log scale %v, want %v", c.name, isLog, c.log)
		}
		got := labels(p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max))
		t.Logf("%s: y in [%.3g, %.3g], labels %v", c.name, p.Y.Min, p.Y.Max, got)
		if c.name == "wide auto" && !slices.Equal(got, []string{"0.5", "1", "2", "5", "10", "20"}) {
			t.Errorf("%s: labels %v, want 0.5 1 2 5 10 20", c.name, got)
		}
		path := filepath.Join(t.TempDir(), strings.ReplaceAll(c.name, " ", "-")+".png")
		if err := plotRMSE(path, c.rows, w, s, c.scale); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := parseAxisScale("logarithmic"); err == nil {
		t.Error("parseAxisScale accepted logarithmic")
	}
}

// TestRunPlotEpsilon: the run plot has a third panel, the epsilon bound of
// each step, when the metrics record one (a private run), and none for a
// non-private run (epsilon 0).
func TestRunPlotEpsilon(t *testing.T) {
	dir := t.TempDir()
	for _, private := range []bool{true, false} {
		var b strings.Builder
		for s := 1; s <= 50; s++ {
			eps := 0.0
			if private {
				eps = 0.1 * math.Sqrt(float64(s))
			}
			fmt.Fprintf(&b, `{"kind":"step","step":%d,"loss":%g,"epsilon":%g}`+"\n", s, 2/float64(s), eps)
			if s%10 == 0 {
				fmt.Fprintf(&b, `{"kind":"eval","step":%d,"test_loss":%g,"test_accuracy":%g}`+"\n", s, 1/float64(s), 1-1/float64(s))
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("m-%v.jsonl", private))
		os.WriteFile(path, []byte(b.String()), 0o644)
		c, err := readCurves(path)
		if err != nil {
			t.Fatal(err)
		}
		plots, err := runPlots("t", c)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]int{true: 3, false: 2}[private]
		if len(plots) != want {
			t.Fatalf("private %v: %d panels, want %d", private, len(plots), want)
		}
		if private {
			if len(c.eps) != 50 || c.eps[49].Y != 0.1*math.Sqrt(50) || plots[2].Y.Label.Text != "epsilon spent (bound)" {
				t.Errorf("epsilon curve: %d points, last %v, label %q", len(c.eps), c.eps[len(c.eps)-1], plots[2].Y.Label.Text)
			}
		}
		if err := writeRunPlot(strings.TrimSuffix(path, ".jsonl")+".png", "t", c); err != nil {
			t.Fatal(err)
		}
	}
}
