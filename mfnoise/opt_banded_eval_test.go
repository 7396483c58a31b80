package mfnoise

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"

	"gonum.org/v1/gonum/mat"
)

// The dense, panel and banded-solve evaluations of tr(A X^-1 A^T) and its
// gradient agree, and the dense and panel ones match central finite
// differences at small n. The sizes cover one block and one panel, several
// of each with ragged last ones, blocks narrower and wider than the band,
// and the full band.
func TestBandProblemEvaluationPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n, bands int }{{9, 2}, {30, 5}, {64, 64}, {50, 17}, {200, 3}, {300, 70}, {161, 80}, {97, 96}, {250, 16}, {193, 1}} {
		w, _ := dpcore.MomentumWorkload(tc.n, 0.9, dpcore.CooldownSchedule(tc.n, 0.25, 0.05))
		a, _ := w.Matrix()
		banded, dense, panels := newBandProblem(a, tc.bands), newBandProblem(a, tc.bands), newBandProblem(a, tc.bands)
		banded.path, dense.path, panels.path = pathSolves, pathDense, pathPanels
		x := make([]float64, banded.dim())
		for i := range x {
			x[i] = 0.1 * (rng.Float64() - 0.5) / float64(tc.bands)
		}
		gb := make([]float64, len(x))
		fb := banded.eval(x, gb)
		scale := 0.0
		for _, v := range gb {
			scale = math.Max(scale, math.Abs(v))
		}
		for _, other := range []*bandProblem{dense, panels} {
			g := make([]float64, len(x))
			f := other.eval(x, g)
			if math.Abs(fb-f) > 1e-11*fb {
				t.Fatalf("n=%d bands=%d path %d: f %v, banded solves %v", tc.n, tc.bands, other.path, f, fb)
			}
			for i := range gb {
				if math.Abs(gb[i]-g[i]) > 1e-10*scale {
					t.Fatalf("n=%d bands=%d path %d: grad[%d] = %v, banded solves %v", tc.n, tc.bands, other.path, i, g[i], gb[i])
				}
			}
			if tc.n > 64 {
				continue // f ~ n^3: central differences lose the digits
			}
			mftest.CheckCentralDifferences(func(x []float64) float64 { return other.eval(x, nil) }, x, g, []int{0, len(x) / 2, len(x) - 1}, 1e-5, func(i int, fd float64) {
				t.Fatalf("n=%d bands=%d path %d: grad[%d] = %v, finite difference %v", tc.n, tc.bands, other.path, i, g[i], fd)
			})
		}
	}
}

// The panel evaluation gives the same bits whatever the number of cores:
// the factorization cache keys an encoder by its inputs alone, so the
// optimizer's iterates must not depend on the machine.
func TestBandEvalSameBitsOnAnyCores(t *testing.T) {
	n, bands := 400, 40
	w, _ := dpcore.MomentumWorkload(n, 0.95, dpcore.CooldownSchedule(n, 0.25, 0.05))
	a, _ := w.Matrix()
	rng := rand.New(rand.NewPCG(7, 8))
	var x []float64
	var want []float64
	var fwant float64
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		p := newBandProblem(a, bands)
		if x == nil {
			x = make([]float64, p.dim())
			for i := range x {
				x[i] = 0.2 * (rng.Float64() - 0.5) / float64(bands)
			}
		}
		g := make([]float64, len(x))
		f := p.eval(x, g)
		if want == nil {
			want, fwant = g, f
			continue
		}
		if f != fwant {
			t.Fatalf("GOMAXPROCS %d: f = %v, with one core %v", procs, f, fwant)
		}
		for i := range g {
			if g[i] != want[i] {
				t.Fatalf("GOMAXPROCS %d: grad[%d] = %v, with one core %v", procs, i, g[i], want[i])
			}
		}
	}
}

// The panel evaluation does not assume a causal workload: for a dense A
// (rows not zero before any column) it agrees with the banded solves too.
func TestBandEvalDenseWorkload(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	n, bands := 150, 20
	a := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			a.Set(i, j, rng.NormFloat64())
		}
	}
	solves, panels := newBandProblem(a, bands), newBandProblem(a, bands)
	solves.path, panels.path = pathSolves, pathPanels
	x := make([]float64, solves.dim())
	for i := range x {
		x[i] = 0.1 * (rng.Float64() - 0.5) / float64(bands)
	}
	gs, gp := make([]float64, len(x)), make([]float64, len(x))
	fs, fp := solves.eval(x, gs), panels.eval(x, gp)
	if math.Abs(fs-fp) > 1e-11*fs {
		t.Fatalf("f = %v by panels, %v by banded solves", fp, fs)
	}
	scale := 0.0
	for _, v := range gs {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range gs {
		if math.Abs(gs[i]-gp[i]) > 1e-10*scale {
			t.Fatalf("grad[%d] = %v by panels, %v by banded solves", i, gp[i], gs[i])
		}
	}
}
