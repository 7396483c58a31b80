package mfnoise

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// denseBandEval holds the n x n work matrices of the GEMM-bound evaluation.
type denseBandEval struct {
	x  *mat.SymDense
	ch mat.Cholesky
	l  mat.TriDense
	w  *mat.Dense
	yy *mat.SymDense
}

// evalPath is how bandProblem.eval computes the loss and its gradient.
type evalPath int

const (
	pathAuto   evalPath = iota // by cost (bandProblem.evalPath)
	pathSolves                 // n banded solves, one row of A at a time
	pathDense                  // dense Cholesky and triangular solves
	pathPanels                 // panels of rows of A, in cache
)

// evalPath returns the evaluation OptimizeBanded uses: by panels. The
// banded solves cost about 4 n^2 bands flops at BLAS-1/2 speed and the
// dense path about 3.3 n^3 at GEMM speed; the panels about 5 n^2 (bands +
// panelBlock) at GEMM speed, each panel in cache. One evaluation at the
// default job's workload, 128 bands, on 2 cores (BenchmarkBandEval): 2.3 ms
// at n = 500 and 24 ms at n = 2000 (32 bands: 8.5 ms), where the blocked
// solves over whole rows that came before took 6.0, 73 and 40 ms. The
// others remain as references for the tests.
func (p *bandProblem) evalPath() evalPath {
	if p.path != pathAuto {
		return p.path
	}
	return pathPanels
}

// evalDense computes f = tr(A X^-1 A^T) and the gradient over the free band
// entries with level-3 BLAS: X = L L^T, W = L^-1 A^T gives f = ||W||_F^2;
// Y = L^-T W = X^-1 A^T gives d f / d X = -(Y Y^T), of which only the band
// is kept (times 2: each free entry appears twice in the symmetric X).
// It returns false when X is not positive definite.
func (p *bandProblem) evalDense(g []float64) (float64, bool) {
	n := p.n
	d := p.dense
	if d == nil {
		d = &denseBandEval{x: mat.NewSymDense(n, nil), w: mat.NewDense(n, n, nil), yy: mat.NewSymDense(n, nil)}
		p.dense = d
	}
	for i := 0; i < n; i++ {
		for j := max(0, i-p.k); j <= i; j++ {
			d.x.SetSym(j, i, p.xb.At(j, i))
		}
	}
	if !d.ch.Factorize(d.x) {
		return math.Inf(1), false
	}
	d.ch.LTo(&d.l)
	d.w.Copy(p.a.T())
	lt := d.l.RawTriangular()
	w := d.w.RawMatrix()
	blas64.Trsm(blas.Left, blas.NoTrans, 1, lt, w)
	f := 0.0
	for i := 0; i < n; i++ {
		for _, v := range w.Data[i*w.Stride : i*w.Stride+n] {
			f += v * v
		}
	}
	blas64.Trsm(blas.Left, blas.Trans, 1, lt, w)
	yy := d.yy.RawSymmetric()
	blas64.Syrk(blas.NoTrans, 1, w, 0, yy)
	idx := 0
	for off := 1; off <= p.k; off++ {
		for i := off; i < n; i++ {
			// yy is stored upper: entry (i-off, i).
			g[idx] = -2 * yy.Data[(i-off)*yy.Stride+i]
			idx++
		}
	}
	return f, true
}
