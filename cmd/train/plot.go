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

// runCurves are the loss and accuracy of a run by step: the training loss
// of every step and the loss and accuracy of every evaluation.
type runCurves struct {
	stepLoss, evalLoss, evalAcc plotter.XYs
	split                       string // "test" or "train" (the evaluations' split)
}

func (c *runCurves) addStep(sm train.StepMetrics) {
	c.stepLoss = append(c.stepLoss, plotter.XY{X: float64(sm.Step), Y: finiteOr0(sm.Loss)})
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

// runPlot is "train plot": the loss and accuracy of a run from its
// metrics file.
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

// writeRunPlot draws the loss (top) and the accuracy (bottom) against the
// step and writes them, PNG or SVG by the extension, atomically.
func writeRunPlot(path, title string, c *runCurves) error {
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
		return fmt.Errorf("plot: %w", err)
	}
	acc := plot.New()
	acc.X.Label.Text = "step"
	acc.Y.Label.Text = split + " accuracy"
	acc.Y.Min, acc.Y.Max = 0, 1
	if len(c.evalAcc) > 0 {
		if err := plotutil.AddLinePoints(acc, c.evalAcc); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	acc.Y.Min, acc.Y.Max = 0, 1
	acc.X.Min, acc.X.Max = loss.X.Min, loss.X.Max
	const w, h = 8 * vg.Inch, 7 * vg.Inch
	var canvas vg.CanvasWriterTo
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	plots := [][]*plot.Plot{{loss}, {acc}}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 4 * vg.Millimeter, PadY: 2 * vg.Millimeter}
	cs := plot.Align(plots, tiles, draw.New(canvas))
	loss.Draw(cs[0][0])
	acc.Draw(cs[1][0])
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := atomicfile.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
