package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/train"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// runCurves are the loss, accuracy and privacy spent of a run by step:
// the training loss and the epsilon bound of every step (the bound where
// the run records one) and the loss and accuracy of every evaluation.
type runCurves struct {
	stepLoss, evalLoss, evalAcc plotter.XYs
	eps                         plotter.XYs
	split                       string // "test" or "train" (the evaluations' split)
}

func (c *runCurves) addStep(sm train.StepMetrics) {
	c.stepLoss = append(c.stepLoss, plotter.XY{X: float64(sm.Step), Y: finiteOr0(sm.Loss)})
	if sm.Epsilon > 0 && !math.IsInf(sm.Epsilon, 0) {
		c.eps = append(c.eps, plotter.XY{X: float64(sm.Step), Y: sm.Epsilon})
	}
}

func (c *runCurves) addEval(em train.EvalMetrics) {
	c.evalLoss = append(c.evalLoss, plotter.XY{X: float64(em.Step), Y: finiteOr0(em.Loss)})
	c.evalAcc = append(c.evalAcc, plotter.XY{X: float64(em.Step), Y: em.Accuracy})
	c.split = em.Split
}

func finiteOr0(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// runPlot is "train plot": the loss, accuracy and epsilon spent of a run
// from its metrics file.
func runPlot(args []string, stdout, stderr io.Writer) error {
	fset := newFlags("plot", stderr)
	metrics := fset.String("metrics", "", "metrics file written by train run -metrics (required)")
	out := fset.String("o", "", "output `FILE`, .png or .svg (default: the metrics file's name with .png)")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if *metrics == "" {
		return usagef("plot: -metrics is required")
	}
	path := *out
	if path == "" {
		path = strings.TrimSuffix(*metrics, filepath.Ext(*metrics)) + ".png"
	}
	if err := checkPlotPath("o", path); err != nil {
		return err
	}
	c, err := readCurves(*metrics)
	if err != nil {
		return err
	}
	if err := writeRunPlot(path, *metrics, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "plot: %s (%d steps, %d evaluations)\n", path, len(c.stepLoss), len(c.evalAcc))
	return nil
}

// checkPlotPath refuses, before any work, a plot file of another format or
// in a directory that cannot be written.
func checkPlotPath(flagName, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return usagef("-%s %q: want a .png or .svg file", flagName, path)
	}
	return checkOutput(flagName, path)
}

// readCurves reads a metrics file (one JSON object a line). A last line
// without its newline is a record being written (or torn by a kill) and
// is skipped; any other line that does not parse is an error.
func readCurves(path string) (*runCurves, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, usagef("plot: -metrics %s is a directory, want the file train run -metrics wrote", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, usagef("plot: -metrics: %v", err)
		}
		return nil, fmt.Errorf("plot: -metrics: %w", err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1]
	}
	c := &runCurves{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for line := 1; sc.Scan(); line++ {
		var rec struct {
			Kind string `json:"kind"`
			Step int    `json:"step"`
			Loss float64
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, usagef("plot: %s line %d: not a metrics record: %v", path, line, err)
		}
		switch rec.Kind {
		case "step":
			var sm train.StepMetrics
			if err := json.Unmarshal(sc.Bytes(), &sm); err != nil {
				return nil, usagef("plot: %s line %d: %v", path, line, err)
			}
			c.addStep(sm)
		case "eval":
			var raw map[string]any
			json.Unmarshal(sc.Bytes(), &raw)
			em := train.EvalMetrics{Step: rec.Step, Split: train.SplitTest}
			if s, _ := raw["split"].(string); s != "" {
				em.Split = s
			}
			em.Loss, _ = raw[em.Split+"_loss"].(float64)
			em.Accuracy, _ = raw[em.Split+"_accuracy"].(float64)
			c.addEval(em)
		}
	}
	if len(c.stepLoss) == 0 && len(c.evalAcc) == 0 {
		return nil, usagef("plot: %s holds no step or evaluation records", path)
	}
	return c, nil
}

// writeRunPlot draws the loss (top), the accuracy and, where the run
// records it, the epsilon spent (bottom) against the step and writes
// them, PNG or SVG by the extension, atomically.
func writeRunPlot(path, title string, c *runCurves) error {
	plots, err := runPlots(title, c)
	if err != nil {
		return err
	}
	w, h := 8*vg.Inch, vg.Length(len(plots))*3.5*vg.Inch
	var canvas vg.CanvasWriterTo
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 4 * vg.Millimeter, PadY: 2 * vg.Millimeter}
	cs := plot.Align(rows, tiles, draw.New(canvas))
	for i, p := range plots {
		p.Draw(cs[i][0])
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := atomicfile.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// runPlots are the panels of writeRunPlot, top to bottom, on one step
// axis with nice ticks.
func runPlots(title string, c *runCurves) ([]*plot.Plot, error) {
	split := c.split
	if split == "" {
		split = train.SplitTest
	}
	loss := plot.New()
	loss.Title.Text = title
	loss.Y.Label.Text = "loss"
	loss.Legend.Top = true
	var lines []any
	if len(c.stepLoss) > 0 {
		lines = append(lines, "training batch loss (not private)", c.stepLoss)
	}
	if len(c.evalLoss) > 0 {
		lines = append(lines, split+" loss", c.evalLoss)
	}
	if err := plotutil.AddLines(loss, lines...); err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	acc := plot.New()
	acc.X.Label.Text = "step"
	acc.Y.Label.Text = split + " accuracy"
	acc.Y.Min, acc.Y.Max = 0, 1
	if len(c.evalAcc) > 0 {
		if err := plotutil.AddLinePoints(acc, c.evalAcc); err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
	}
	acc.Y.Min, acc.Y.Max = 0, 1
	plots := []*plot.Plot{loss, acc}
	if len(c.eps) > 0 {
		eps := plot.New()
		eps.Y.Label.Text = "epsilon spent (bound)"
		if err := plotutil.AddLines(eps, c.eps); err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		eps.Y.Min = 0
		acc.X.Label.Text = ""
		eps.X.Label.Text = "step"
		plots = append(plots, eps)
	}
	for _, p := range plots {
		p.X.Min, p.X.Max = loss.X.Min, loss.X.Max
		p.X.Tick.Marker = niceTicks{}
		p.Y.Tick.Marker = niceTicks{}
	}
	return plots, nil
}
