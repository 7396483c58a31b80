package mfnoise

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The GEMM-bound and the banded-solve evaluations of tr(A X^-1 A^T) and its
// gradient agree, and both match central finite differences.
func TestBandProblemDenseAndBandedPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n, bands int }{{9, 2}, {30, 5}, {64, 64}, {50, 17}} {
		w, _ := MomentumWorkload(tc.n, 0.9, CooldownSchedule(tc.n, 0.25, 0.05))
		a, _ := w.Matrix()
		banded, dense := newBandProblem(a, tc.bands), newBandProblem(a, tc.bands)
		banded.path, dense.path = -1, +1
		x := make([]float64, banded.dim())
		for i := range x {
			x[i] = 0.1 * (rng.Float64() - 0.5) / float64(tc.bands)
		}
		gb, gd := make([]float64, len(x)), make([]float64, len(x))
		fb, fd := banded.eval(x, gb), dense.eval(x, gd)
		if math.Abs(fb-fd) > 1e-11*fb {
			t.Fatalf("n=%d bands=%d: f banded %v, dense %v", tc.n, tc.bands, fb, fd)
		}
		scale := 0.0
		for _, v := range gb {
			scale = math.Max(scale, math.Abs(v))
		}
		for i := range gb {
			if math.Abs(gb[i]-gd[i]) > 1e-10*scale {
				t.Fatalf("n=%d bands=%d: grad[%d] banded %v, dense %v", tc.n, tc.bands, i, gb[i], gd[i])
			}
		}
		checkCentralDifferences(func(x []float64) float64 { return dense.eval(x, nil) }, x, gd, []int{0, len(x) / 2, len(x) - 1}, 1e-5, func(i int, fd float64) {
			t.Fatalf("n=%d bands=%d: dense grad[%d] = %v, finite difference %v", tc.n, tc.bands, i, gd[i], fd)
		})
	}
}
