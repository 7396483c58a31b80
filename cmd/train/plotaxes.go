package main

import (
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// niceTicks marks a linear axis at the multiples of a step of 1, 2 or 5
// times a power of ten (3 to 6 labels), with unlabelled minor ticks
// between (gonum's default labels 1..300 at 40, 160, 280).
type niceTicks struct{}

// niceStep is the smallest 1, 2 or 5 x 10^k at least raw (> 0), and its
// mantissa.
func niceStep(raw float64) (step float64, mantissa int) {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []int{1, 2, 5, 10} {
		if s := float64(m) * p; s >= raw*(1-1e-12) {
			if m == 10 {
				return s, 1
			}
			return s, m
		}
	}
	return 10 * p, 1
}

// Ticks implements plot.Ticker.
func (niceTicks) Ticks(min, max float64) []plot.Tick {
	span := max - min
	if !(span > 0) || math.IsInf(span, 0) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	step, m := niceStep(span / 5)
	prec := max0(-int(math.Floor(math.Log10(step) + 1e-9)))
	sub := step / 5
	if m == 2 {
		sub = step / 4
	}
	var ticks []plot.Tick
	eps := step * 1e-9
	for i := math.Ceil((min - eps) / sub); ; i++ {
		v := i * sub
		if v > max+eps {
			break
		}
		t := plot.Tick{Value: v}
		if q := v / step; math.Abs(q-math.Round(q)) < 1e-6 {
			v = math.Round(q) * step
			if v == 0 {
				v = 0 // not -0
			}
			t = plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)}
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func max0(i int) int {
	if i < 0 {
		return 0
	}
	return i
}

// logTicks marks a logarithmic axis at 1, 2 and 5 x 10^k (at 10^k alone
// when the range spans more than two decades), with unlabelled minor
// ticks at the other multiples of 10^k; a range within one decade falls
// back to niceTicks.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return niceTicks{}.Ticks(min, max)
	}
	decades := math.Log10(max / min)
	labelled := map[int]bool{1: true, 2: decades <= 2, 5: decades <= 2}
	var ticks []plot.Tick
	labels := 0
	for k := int(math.Floor(math.Log10(min))); k <= int(math.Ceil(math.Log10(max))); k++ {
		p := math.Pow(10, float64(k))
		for m := 1; m <= 9; m++ {
			v := float64(m) * p
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if labelled[m] {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
				labels++
			}
			ticks = append(ticks, t)
		}
	}
	if labels < 2 {
		return niceTicks{}.Ticks(min, max)
	}
	return ticks
}

// axisScale is how a plot's y axis is scaled: automatic (logarithmic when
// the positive values span more than logDecades decades), linear or
// logarithmic.
type axisScale int

const (
	scaleAuto axisScale = iota
	scaleLinear
	scaleLog
)

// logDecades is the span of the values above which scaleAuto is
// logarithmic.
const logDecades = 1.5

func parseAxisScale(s string) (axisScale, error) {
	switch s {
	case "auto":
		return scaleAuto, nil
	case "linear":
		return scaleLinear, nil
	case "log":
		return scaleLog, nil
	}
	return 0, fmt.Errorf("%q: want auto, linear or log", s)
}

// logScaled reports whether a y axis of scale s over the series is
// logarithmic: always for scaleLog; for scaleAuto when the positive
// values span more than logDecades decades and every series has one (the
// points at zero or below are left out of a log axis).
func logScaled(s axisScale, series []plotter.XYs) bool {
	switch s {
	case scaleLinear:
		return false
	case scaleLog:
		return true
	}
	lo, hi := math.Inf(1), 0.0
	for _, xys := range series {
		n := 0
		for _, p := range xys {
			if p.Y > 0 && !math.IsInf(p.Y, 0) {
				lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
				n++
			}
		}
		if n == 0 {
			return false
		}
	}
	return hi > 0 && math.Log10(hi/lo) > logDecades
}

// setLogY makes p's y axis logarithmic with logTicks.
func setLogY(p *plot.Plot) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
}
