package clip

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/clip/cliptest"
	"github.com/dpmf-go/dpmf/models"
)

// update rewrites the golden files of this package's tests from the
// current code.
var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// ruleUnits are fixed per-unit gradients with their losses: ordinary
// ones at scales from subnormal to near the float32 maximum, the extreme
// examples of cliptest (applied to the gradient itself), zero gradients,
// norms at and around the clip norm, and non-finite losses.
func ruleUnits(c float64) (gs [][]float32, losses []float64) {
	rng := rand.New(rand.NewPCG(38, 3))
	kinds := cliptest.Kinds()
	for u := range 96 {
		d := []int{1, 3, 17, 64}[u%4]
		g := make([]float32, d)
		scale := math.Pow(10, float64(u%80)-42)
		for j := range g {
			g[j] = float32(rng.NormFloat64() * scale)
		}
		switch {
		case u%7 == 3:
			cliptest.Corrupt(rng, kinds[(u/7)%len(kinds)], g)
		case u%11 == 5:
			clear(g)
		case u%13 == 6:
			// The norm within a few ulps of c and of c(1-2^-20).
			s := 0.0
			for _, v := range g {
				s += float64(v) * float64(v)
			}
			k := c / math.Sqrt(s)
			if u%2 == 0 {
				k *= 1 - 1.0/(1<<20)
			}
			for j := range g {
				g[j] = float32(float64(g[j]) * k)
			}
		}
		loss := rng.Float64() * 3
		if u%17 == 9 {
			loss = []float64{math.NaN(), math.Inf(1)}[u%2]
		}
		gs, losses = append(gs, g), append(losses, loss)
	}
	return gs, losses
}

// ruleOptions are the rule's settings the golden results cover.
func ruleOptions() []Options {
	var out []Options
	for _, c := range []float64{1e-30, 1e-6, 0.01, 1, 1e3, 1e30} {
		out = append(out, Options{Norm: c}, Options{Norm: c, LInfZero: 100 * c})
	}
	return append(out, Options{NonPrivate: true})
}

// TestAccumulatorMatchesPreviousCode compares the clipping accumulator's
// running sums and statistics, unit by unit and batch by batch, with the
// previous code's (Factor and AddScaled of package clip, the per-example
// loop of package gorgoniadp) on fixed units, bit for bit.
func TestAccumulatorMatchesPreviousCode(t *testing.T) {
	var got []string
	for oi, opt := range ruleOptions() {
		c := opt.Norm
		if c == 0 {
			c = 1
		}
		gs, losses := ruleUnits(c)
		for b := 0; b < len(gs); b += 8 {
			d := 64
			sum := make([]float32, d)
			st := ruleBatch(t, opt, gs[b:b+8], losses[b:b+8], sum)
			got = append(got, cliptest.Golden(fmt.Sprintf("opt%d/batch%d", oi, b/8), sum, st))
		}
	}
	cliptest.CheckGolden(t, "testdata/accumulator.golden", false, got, *update)
}

// ruleBatch adds the units gs (their gradients zero-padded to len(sum))
// to sum as one batch of an Accumulator. (The previous code, whose results
// testdata/accumulator.golden holds, was the per-example loop of package
// gorgoniadp: clip.Factor and clip.AddScaled.)
func ruleBatch(t *testing.T, opt Options, gs [][]float32, losses []float64, sum []float32) Stats {
	t.Helper()
	a, err := NewAccumulator(opt)
	if err != nil {
		t.Fatal(err)
	}
	a.Begin(sum, len(gs))
	pad := make([]float32, len(sum))
	for i, g := range gs {
		clear(pad)
		copy(pad, g)
		a.Add(i, pad, losses[i])
	}
	return a.Stats()
}

// goldenBatch is a fixed batch of n examples for m, every fifth one an
// extreme example of cliptest (the kinds in turn).
func goldenBatch(m models.Model, tabular bool, n int, seed uint64) ([]float32, []int) {
	rng := rand.New(rand.NewPCG(seed, 38))
	in := m.InputShape()
	chw := in[0] * in[1] * in[2]
	x, y := randBatch(rng, n, chw, m.Classes())
	kinds := cliptest.Kinds()
	for i := range n {
		ex := x[i*chw : (i+1)*chw]
		if tabular {
			ex[3] = float32(rng.IntN(4))
			ex = ex[:3]
		}
		if i%5 == 2 {
			cliptest.Corrupt(rng, kinds[(i/5)%len(kinds)], ex)
		}
	}
	return x, y
}

// TestEnginesMatchPreviousCode compares ClippedSum (flat, per-layer,
// L-inf zeroing, non-private), ClippedSumPieces and UserClippedSum (sum
// and mean) on fixed batches with extreme examples with the previous
// code's results, bit for bit.
func TestEnginesMatchPreviousCode(t *testing.T) {
	var got []string
	for mi, mc := range extremeModels() {
		m, err := mc.mk()
		if err != nil {
			t.Fatal(err)
		}
		tab := mc.name == "tabular"
		const n, maxBatch, pieces = 23, 32, 71
		x, y := goldenBatch(m, tab, pieces, uint64(mi))
		lay := m.Layout()
		opts := map[string]Options{
			"flat":       {Norm: 0.05, MaxBatch: maxBatch},
			"flat-tiny":  {Norm: 1e-12, MaxBatch: maxBatch},
			"flat-large": {Norm: 3, MaxBatch: maxBatch},
			"linf":       {Norm: 0.05, LInfZero: 0.5, MaxBatch: maxBatch},
			"nonprivate": {NonPrivate: true, MaxBatch: maxBatch},
		}
		if !tab {
			thr := make([]float64, len(lay)/2)
			for l := range thr {
				thr[l] = 0.02 * (1 + float64(l))
			}
			opts["perlayer"] = Options{PerLayer: thr, MaxBatch: maxBatch}
		}
		for _, on := range []string{"flat", "flat-tiny", "flat-large", "linf", "nonprivate", "perlayer"} {
			opt, ok := opts[on]
			if !ok {
				continue
			}
			e, err := New(m, opt)
			if err != nil {
				t.Fatal(err)
			}
			sum := make([]float32, m.NumParams())
			for rep := range 2 {
				st, err := e.ClippedSum(x[:n*e.chw], y[:n], sum)
				if err != nil {
					t.Fatal(err)
				}
				if rep == 1 {
					got = append(got, cliptest.Golden(mc.name+"/"+on+"/sum", sum, st))
				}
			}
			g := e.Granule()
			st, err := e.ClippedSumPieces(t.Context(), pieces, g, func(lo, hi int) ([]float32, []int, error) {
				return x[lo*e.chw : hi*e.chw], y[lo:hi], nil
			}, sum)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, cliptest.Golden(mc.name+"/"+on+"/pieces", sum, st))
			if on != "flat" && on != "flat-tiny" {
				continue
			}
			groups := []int{1, 3, 5, 2, 7, 1, 4}
			for _, mean := range []bool{false, true} {
				st, err := e.UserClippedSum(x[:n*e.chw], y[:n], groups, UserOptions{Mean: mean}, sum)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, cliptest.Golden(fmt.Sprintf("%s/%s/users-mean=%v", mc.name, on, mean), sum, st))
			}
		}
	}
	cliptest.CheckGolden(t, "testdata/engines.golden", true, got, *update)
}
