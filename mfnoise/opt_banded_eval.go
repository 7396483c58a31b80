package mfnoise

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// The evaluation of the banded objective tr(A X^-1 A^T) and its gradient
// (optimizeBanded's inner loop) by three paths: banded solves, dense
// GEMM-bound factorizations, and panels of rows of A in cache (the one
// used; the others remain as references for the tests).

// bandProblem evaluates tr(A^T A X^-1) and its gradient over the free
// entries of a banded X with unit diagonal. Free entry (d, i) is X[i, i-d]
// for d = 1..bands-1, i = d..n-1, stored d-major.
type bandProblem struct {
	a    *mat.Dense
	n, k int // k = bands - 1, the half bandwidth
	xb   *mat.SymBandDense
	ch   mat.BandCholesky
	last evalCache
	// dense holds the work matrices of the GEMM-bound evaluation used
	// for wide bands (evalDense).
	dense *denseBandEval
	// panels holds the work of the panel evaluation
	// (evalPanels).
	panels *panelEval
	// path forces the evaluation in tests (0: by cost).
	path evalPath
}

func newBandProblem(a *mat.Dense, bands int) *bandProblem {
	n, _ := a.Dims()
	return &bandProblem{a: a, n: n, k: bands - 1, xb: mat.NewSymBandDense(n, bands-1, nil)}
}

func (p *bandProblem) dim() int {
	d := 0
	for off := 1; off <= p.k; off++ {
		d += p.n - off
	}
	return d
}

func (p *bandProblem) fill(x []float64) {
	for i := 0; i < p.n; i++ {
		p.xb.SetSymBand(i, i, 1)
	}
	idx := 0
	for off := 1; off <= p.k; off++ {
		for i := off; i < p.n; i++ {
			p.xb.SetSymBand(i-off, i, x[idx])
			idx++
		}
	}
}

// band returns X for the free entries x as a dense symmetric matrix.
func (p *bandProblem) band(x []float64) *mat.SymDense {
	p.fill(x)
	out := mat.NewSymDense(p.n, nil)
	for i := 0; i < p.n; i++ {
		for j := i; j <= min(i+p.k, p.n-1); j++ {
			out.SetSym(i, j, p.xb.At(i, j))
		}
	}
	return out
}

// eval returns tr(A X^-1 A^T) and, if g is not nil, stores the gradient in
// g. Points outside the positive definite cone have value +Inf, which the
// line search backs away from.
func (p *bandProblem) eval(x, g []float64) float64 {
	return p.last.eval(x, g, func(x, grad []float64) (float64, bool) {
		switch p.evalPath() {
		case pathDense:
			p.fill(x)
			return p.evalDense(grad)
		case pathSolves:
			return p.evalSolves(x, grad)
		}
		return p.evalPanels(x, grad)
	})
}

// evalCache keeps the last evaluation of an objective: L-BFGS asks for
// the value and the gradient at one point.
type evalCache struct {
	x, g []float64
	f    float64
	ok   bool
}

// eval returns the value at x, from the cache or by compute (which writes
// the gradient and reports false outside the domain: value +Inf, gradient
// NaN), and copies the gradient to g when g is not nil.
func (c *evalCache) eval(x, g []float64, compute func(x, grad []float64) (float64, bool)) float64 {
	if !(c.ok && floats.Equal(x, c.x)) {
		if c.x == nil {
			c.x = make([]float64, len(x))
			c.g = make([]float64, len(x))
		}
		copy(c.x, x)
		f, ok := compute(x, c.g)
		if !ok {
			f = math.Inf(1)
			for i := range c.g {
				c.g[i] = math.NaN()
			}
		}
		c.f, c.ok = f, true
	}
	if g != nil {
		copy(g, c.g)
	}
	return c.f
}

// reset forgets the cached evaluation.
func (c *evalCache) reset() { c.ok = false }

// evalSolves computes f = tr(A X^-1 A^T) and the gradient over the free
// band entries by n banded solves, one row of A at a time (the reference
// of the tests). It returns false when X is not positive definite.
func (p *bandProblem) evalSolves(x, grad []float64) (float64, bool) {
	p.fill(x)
	if !p.ch.Factorize(p.xb) {
		return 0, false
	}
	// Row r of Z = A X^-1 solves X z_r = a_r: contiguous banded solves,
	// split over goroutines. tr(A X^-1 A^T) = sum_r a_r . z_r and
	// d/dX_il tr(G X^-1) = -(Z^T Z)_il, accumulated row by row.
	workers := min(runtime.GOMAXPROCS(0), p.n)
	fs := make([]float64, workers)
	gs := make([][]float64, workers)
	var wg sync.WaitGroup
	for wk := 0; wk < workers; wk++ {
		gs[wk] = make([]float64, len(grad))
		wg.Add(1)
		go func(wk int) {
			defer wg.Done()
			z := mat.NewVecDense(p.n, nil)
			zr := z.RawVector().Data
			g := gs[wk]
			for r := wk; r < p.n; r += workers {
				ar := p.a.RawRowView(r)
				// Condition errors only warn; the value is still computed.
				_ = p.ch.SolveVecTo(z, mat.NewVecDense(p.n, ar))
				fs[wk] += floats.Dot(ar, zr)
				idx := 0
				for off := 1; off <= p.k; off++ {
					gb := g[idx : idx+p.n-off]
					zl := zr[:p.n-off]
					for i, zi := range zr[off:] {
						gb[i] += zi * zl[i]
					}
					idx += p.n - off
				}
			}
		}(wk)
	}
	wg.Wait()
	for i := range grad {
		sum := 0.0
		for wk := range gs {
			sum += gs[wk][i]
		}
		grad[i] = -2 * sum
	}
	return floats.Sum(fs), true
}

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

// evalPath returns the evaluation optimizeBanded uses: by panels. The
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
	blas64.Trsm(gblas.Left, gblas.NoTrans, 1, lt, w)
	f := 0.0
	for i := 0; i < n; i++ {
		for _, v := range w.Data[i*w.Stride : i*w.Stride+n] {
			f += v * v
		}
	}
	blas64.Trsm(gblas.Left, gblas.Trans, 1, lt, w)
	yy := d.yy.RawSymmetric()
	blas64.Syrk(gblas.NoTrans, 1, w, 0, yy)
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

// The panel evaluation computes f = tr(A X^-1 A^T) and the band of its
// gradient one panel of rows of A at a time, in the reversed order of
// indices (X' = J X J and A' = A J, J the exchange matrix), where the
// Cholesky factor X' = L L^T is lower triangular and banded:
//
//   - W = A' L^-T, so f = ||W||_F^2; for a lower-triangular (causal) A the
//     row r of A' is zero before column n-1-r and so is the row r of W, so
//     the forward solve of a panel starts where its rows do;
//   - Y = W L^-1 = A' X'^-1, and the gradient of f over X' is -Y^T Y =
//     -sum over the rows r of y_r^T y_r, of which only the band is formed.
//
// The rows of A are independent, so the panels are dealt out to the cores
// with nothing shared but the factor; a panel (panelRows x n, twice) stays
// in cache through its forward solve, backward solve and gradient, where
// blocks of n rows streamed from memory and were packed again for every
// product. Each block step of a solve is two products with small matrices
// prepared once per evaluation (the diagonal block's inverse and the
// coupling block multiplied by it), so no triangular solve runs per panel.
//
// Panels are summed within panelGroups fixed groups (panel p in group p mod
// panelGroups, in order) and the groups in order, so the result is the same
// bits whatever the number of cores.

const (
	// panelRows is the number of rows of A per panel: a multiple of the
	// GEMM tile height; 2 x panelRows x n floats stay in L2/L3 at n = 2000.
	panelRows = 96
	// panelGroups is the number of fixed groups the panels are summed in:
	// at most this many cores share an evaluation.
	panelGroups = 4
	// panelBlock is the width of a block step of the solves. The products
	// per block cost about (block + half bandwidth) per row and column, so
	// narrow blocks do less work; 16, the GEMM tile's width, was the
	// fastest (n = 2000, 128 bands: 24 ms an evaluation against 27-34 ms
	// for 32 to 96).
	panelBlock = 16
)

// panelEval is the state of the panel evaluation of one banded problem:
// its constant reversed workload, the factor of the current X and the
// sums and scratch of the panels.
type panelEval struct {
	n, k, s int
	// ar is A' = A J (A with its columns reversed), row-major; first[p]
	// the first column where panel p's rows of A' are not all zero,
	// rounded down to a block.
	ar    []float64
	first []int
	// xl holds X' (the band of its lower triangle, n x n row-major) and
	// then, in place, its Cholesky factor L (cholWork.factor); made on
	// first use. lb, when inBand, holds L instead by its band:
	// L[j, j-e] at lb[j*(k+1) + e] (encoderBandProblem's factor, O(n k)).
	xl, lb []float64
	inBand bool
	// cross makes the panels sum W^T Y instead of Y^T Y over the band
	// (encoderBandProblem's gradient, -2 (A C^-1)^T A X^-1): W vanishes
	// before a panel's first column, so neither the products nor the
	// backward solve go below it.
	cross bool
	// chol is the scratch of the factorization: the inverse of a diagonal
	// block and the panel below it.
	chol cholWork
	// Per block I = [i0, i1), packed for the products of the block steps:
	// L_II^-T, L_II^-1, -(L_II^-1 L_IJ)^T for the k columns J before I and
	// -L_J+I L_II^-1 for the k rows J+ after I.
	pInvT, pInv, pM, pN []blas.PackedB64
	// Per group: the sum of f and of Y^T Y over the block rows of the band
	// (block I, transposed: min(n, i1+k)-i0 rows by i1-i0 columns, at
	// off[I]).
	gf  []float64
	gyy [][]float64
	off []int
	// Per worker: W and Y of one panel and a serial GEMM.
	work []panelWork
}

type panelWork struct {
	w, y    []float64
	t, u, v []float64 // scratch of prepareBlock
	gemm    blas.Serial64
}

func newPanelEval(a []float64, n, k int) *panelEval {
	s := max(1, min(panelBlock, n))
	d := &panelEval{n: n, k: k, s: s, ar: make([]float64, n*n)}
	for r := 0; r < n; r++ {
		row := a[r*n : r*n+n]
		dst := d.ar[r*n : r*n+n]
		for c, v := range row {
			dst[n-1-c] = v
		}
	}
	for r0 := 0; r0 < n; r0 += panelRows {
		first := n
		for r := r0; r < min(r0+panelRows, n); r++ {
			for c, v := range d.ar[r*n : r*n+n] {
				if v != 0 {
					first = min(first, c)
					break
				}
			}
		}
		d.first = append(d.first, first/s*s)
	}
	blocks := (n + s - 1) / s
	d.pInvT, d.pInv, d.pM, d.pN = make([]blas.PackedB64, blocks), make([]blas.PackedB64, blocks), make([]blas.PackedB64, blocks), make([]blas.PackedB64, blocks)
	size := 0
	for b := range blocks {
		i0 := b * s
		i1 := min(i0+s, n)
		sz := i1 - i0
		j1 := min(n, i1+k)
		d.off = append(d.off, size)
		size += sz * (j1 - i0)
	}
	d.gf = make([]float64, panelGroups)
	d.gyy = make([][]float64, panelGroups)
	for g := range d.gyy {
		d.gyy[g] = make([]float64, size)
	}
	return d
}

// factor fills the band of X' from the free entries x (unit diagonal),
// factors it and prepares the block matrices, the blocks in parallel. It
// returns false when X is not positive definite.
func (d *panelEval) factor(x []float64) bool {
	n, k := d.n, d.k
	if d.xl == nil {
		d.xl = make([]float64, n*n)
	}
	d.inBand, d.cross = false, false
	xl := d.xl
	for i := 0; i < n; i++ {
		xl[i*n+i] = 1
	}
	// Free entry (o, i) is X[i, i-o] = X'[n-1-i, n-1-i+o]; both triangles
	// are written, so what the factorization leaves above the diagonal
	// does not carry over.
	idx := 0
	for o := 1; o <= k; o++ {
		for i := o; i < n; i++ {
			r := n - 1 - i
			xl[(r+o)*n+r] = x[idx]
			xl[r*n+r+o] = x[idx]
			idx++
		}
	}
	if !d.chol.factor(xl, n, k) {
		return false
	}
	return d.prepare()
}

// prepare packs the block matrices of the factor L in xl, the blocks in
// parallel; false when a diagonal block is singular.
func (d *panelEval) prepare() bool {
	var failed atomic.Bool
	d.parallel(len(d.pInv), func(wk *panelWork, b int) {
		if !d.prepareBlock(wk, b) {
			failed.Store(true)
		}
	})
	return !failed.Load()
}

// cholBlock is the block size of cholesky.
const cholBlock = 32

// cholWork is the scratch of a blocked band Cholesky factorization.
type cholWork struct {
	inv, p []float64
	gemm   blas.Serial64
}

// factor overwrites the lower triangle of the symmetric positive definite
// n x n matrix a (row-major), zero outside the half bandwidth k, with its
// Cholesky factor L (a = L L^T), by blocks of cholBlock columns: the
// diagonal block by the unblocked algorithm, the k rows below it by the
// inverse of its transpose (one product), and the trailing k x k window by
// one product, so the O(n k^2) work runs at GEMM speed and the entries
// outside the band stay zero. Entries above the diagonal are left
// undefined. It returns false when a is not positive definite.
func (c *cholWork) factor(a []float64, n, k int) bool {
	for j0 := 0; j0 < n; j0 += cholBlock {
		j1 := min(j0+cholBlock, n)
		sz := j1 - j0
		for j := j0; j < j1; j++ {
			rj := a[j*n+j0 : j*n+j]
			v := a[j*n+j]
			for _, l := range rj {
				v -= l * l
			}
			if !(v > 0) {
				return false
			}
			v = math.Sqrt(v)
			a[j*n+j] = v
			for r := j + 1; r < j1; r++ {
				rr := a[r*n+j0 : r*n+j]
				w := a[r*n+j]
				for m, l := range rj {
					w -= rr[m] * l
				}
				a[r*n+j] = w / v
			}
		}
		r1 := min(n, j1+k)
		if j1 == r1 {
			continue
		}
		nr := r1 - j1
		// inv = L_JJ^-1 (lower), then L_RJ = A_RJ inv^T.
		inv := grow(&c.inv, sz*sz)
		for r := 0; r < sz; r++ {
			row := inv[r*sz : r*sz+sz]
			copy(row[:r+1], a[(j0+r)*n+j0:(j0+r)*n+j0+r+1])
			clear(row[r+1:])
		}
		if ok := lapack64.Trtri(blas64.Triangular{Uplo: gblas.Lower, Diag: gblas.NonUnit, N: sz, Stride: sz, Data: inv}); !ok {
			return false
		}
		p := grow(&c.p, nr*sz)
		c.gemm.Dgemm(gblas.NoTrans, gblas.Trans, nr, sz, sz, 1, a[j1*n+j0:], n, inv, sz, 0, p, sz)
		for r := 0; r < nr; r++ {
			copy(a[(j1+r)*n+j0:(j1+r)*n+j1], p[r*sz:r*sz+sz])
		}
		// A_RR -= L_RJ L_RJ^T (the whole window: it lies inside the band).
		// Only the lower triangle is needed: strips of cholBlock columns,
		// each from its diagonal down.
		for c0 := 0; c0 < nr; c0 += cholBlock {
			w := min(cholBlock, nr-c0)
			c.gemm.Dgemm(gblas.NoTrans, gblas.Trans, nr-c0, w, sz, -1, p[c0*sz:], sz, p[c0*sz:], sz, 1, a[(j1+c0)*n+j1+c0:], n)
		}
	}
	return true
}

// parallel runs f(worker, i) for i in [0, count) over the cores.
func (d *panelEval) parallel(count int, f func(wk *panelWork, i int)) {
	workers := min(runtime.GOMAXPROCS(0), panelGroups, count)
	for len(d.work) < workers {
		d.work = append(d.work, panelWork{w: make([]float64, panelRows*d.n), y: make([]float64, panelRows*d.n)})
	}
	var next atomic.Int64
	linalg.ParallelDo(workers, func(wk int) {
		for {
			i := int(next.Add(1)) - 1
			if i >= count {
				return
			}
			f(&d.work[wk], i)
		}
	})
}

// prepareBlock inverts the diagonal block b of L and packs the four
// products of a block step; false when the block is singular.
func (d *panelEval) prepareBlock(wk *panelWork, b int) bool {
	n, k, s := d.n, d.k, d.s
	l := func(j, i int) float64 {
		switch {
		case i > j || j-i > k:
			return 0
		case d.inBand:
			return d.lb[j*(k+1)+j-i]
		}
		return d.xl[j*n+i]
	}
	i0 := b * s
	i1 := min(i0+s, n)
	sz := i1 - i0
	inv := grow(&wk.v, sz*sz) // L_II^-1, lower, row-major
	for r := 0; r < sz; r++ {
		for c := 0; c < sz; c++ {
			inv[r*sz+c] = l(i0+r, i0+c)
		}
	}
	if ok := lapack64.Trtri(blas64.Triangular{Uplo: gblas.Lower, Diag: gblas.NonUnit, N: sz, Stride: sz, Data: inv}); !ok {
		return false
	}
	blas.PackB64(gblas.Trans, sz, sz, 1, inv, sz, &d.pInvT[b])
	blas.PackB64(gblas.NoTrans, sz, sz, 1, inv, sz, &d.pInv[b])
	// -(L_II^-1 L_IJ)^T = -L_IJ^T L_II^-T, |J| x sz.
	if j0 := max(0, i0-k); j0 < i0 {
		nj := i0 - j0
		lij := grow(&wk.t, nj*sz) // L_IJ^T, nj x sz
		for r := 0; r < sz; r++ {
			for c := 0; c < nj; c++ {
				lij[c*sz+r] = l(i0+r, j0+c)
			}
		}
		m := grow(&wk.u, nj*sz)
		wk.gemm.Dgemm(gblas.NoTrans, gblas.Trans, nj, sz, sz, 1, lij, sz, inv, sz, 0, m, sz)
		blas.PackB64(gblas.NoTrans, nj, sz, -1, m, sz, &d.pM[b])
	}
	// -L_J+I L_II^-1, |J+| x sz.
	if j1 := min(n, i1+k); i1 < j1 {
		nj := j1 - i1
		lji := grow(&wk.t, nj*sz)
		for r := 0; r < nj; r++ {
			for c := 0; c < sz; c++ {
				lji[r*sz+c] = l(i1+r, i0+c)
			}
		}
		m := grow(&wk.u, nj*sz)
		wk.gemm.Dgemm(gblas.NoTrans, gblas.NoTrans, nj, sz, sz, 1, lji, sz, inv, sz, 0, m, sz)
		blas.PackB64(gblas.NoTrans, nj, sz, -1, m, sz, &d.pN[b])
	}
	return true
}

// grow returns (*buf)[:n], reallocating when it is shorter.
func grow(buf *[]float64, n int) []float64 {
	if cap(*buf) < n {
		*buf = make([]float64, n)
	}
	return (*buf)[:n]
}

// evalPanels computes f = tr(A X^-1 A^T) and the gradient over the free
// band entries by panels of rows (see panelEval). It returns false when X
// is not positive definite.
func (p *bandProblem) evalPanels(x, g []float64) (float64, bool) {
	d := p.panelEval()
	if !d.run(x, nil) {
		return 0, false
	}
	f := 0.0
	for gi := range d.gf {
		f += d.gf[gi]
	}
	// The band of Y^T Y over X' = J X J, summed over the groups in order,
	// into the free entries (o, i) = X[i, i-o] = X'[n-1-i, n-1-i+o].
	n, k, s := d.n, d.k, d.s
	base := make([]int, k+1)
	for o := 2; o <= k; o++ {
		base[o] = base[o-1] + n - (o - 1)
	}
	d.parallel(len(d.off), func(_ *panelWork, b int) {
		i0 := b * s
		i1 := min(i0+s, n)
		sz := i1 - i0
		for o := 1; o <= k; o++ {
			for r := i0; r < min(i1, n-o); r++ {
				// (Y^T Y)[r, r+o], stored transposed: row r+o-i0, column r-i0.
				at := d.off[b] + (r+o-i0)*sz + r - i0
				sum := 0.0
				for gi := range d.gyy {
					sum += d.gyy[gi][at]
				}
				g[base[o]+n-1-r-o] = -2 * sum
			}
		}
	})
	return f, true
}

// panelEval returns the panel evaluation of p, made on first use.
func (p *bandProblem) panelEval() *panelEval {
	if p.panels == nil {
		ar := p.a.RawMatrix()
		a := ar.Data
		if ar.Stride != p.n {
			a = make([]float64, p.n*p.n)
			for r := 0; r < p.n; r++ {
				copy(a[r*p.n:], ar.Data[r*ar.Stride:r*ar.Stride+p.n])
			}
		}
		p.panels = newPanelEval(a, p.n, p.k)
	}
	return p.panels
}

// run factors X for the free entries x and runs every panel, leaving the
// groups' sums in gf and gyy; with y not nil (n x n) it also stores
// Y = A X^-1 there (in the original order of indices). It returns false
// when X is not positive definite.
func (d *panelEval) run(x, y []float64) bool {
	if !d.factor(x) {
		return false
	}
	d.runPanels(y, nil)
	return true
}

// runPanels runs every panel with the factor prepared, leaving the groups'
// sums in gf and gyy; with y not nil (n x n) it also stores Y = A X^-1
// there and with z not nil W J = A C^-1 (both in the original order of
// indices).
func (d *panelEval) runPanels(y, z []float64) {
	for gi := range d.gyy {
		clear(d.gyy[gi])
		d.gf[gi] = 0
	}
	d.parallel(panelGroups, func(wk *panelWork, gi int) {
		for pi := gi; pi < len(d.first); pi += panelGroups {
			d.gf[gi] += d.panel(wk, pi, d.gyy[gi])
			// A X^-1 = A' X'^-1 J and A C^-1 = W J: the columns reversed.
			n, r0 := d.n, pi*panelRows
			for _, out := range []struct{ src, dst []float64 }{{wk.y, y}, {wk.w, z}} {
				if out.dst == nil {
					continue
				}
				for r := 0; r < min(panelRows, n-r0); r++ {
					src, dst := out.src[r*n:r*n+n], out.dst[(r0+r)*n:(r0+r)*n+n]
					for c, v := range src {
						dst[n-1-c] = v
					}
				}
			}
		}
	})
}

// panel runs panel pi: its W and Y, ||W||_F^2 (returned) and Y^T Y over
// the band, added into yy.
func (d *panelEval) panel(wk *panelWork, pi int, yy []float64) float64 {
	n, k, s := d.n, d.k, d.s
	r0 := pi * panelRows
	h := min(panelRows, n-r0)
	w, y, a := wk.w, wk.y, d.ar[r0*n:]
	gm := &wk.gemm
	first := d.first[pi]
	// Forward: W_I = A'_I L_II^-T - W_J (L_II^-1 L_IJ)^T, from the first
	// block where the panel's rows of A' are not zero.
	for r := 0; r < h; r++ {
		clear(w[r*n : r*n+first])
	}
	for i0 := first; i0 < n; i0 += s {
		b := i0 / s
		gm.DgemmPacked(gblas.NoTrans, h, a[i0:], n, &d.pInvT[b], 0, w[i0:], n)
		if j0 := max(0, i0-k); j0 < i0 {
			gm.DgemmPacked(gblas.NoTrans, h, w[j0:], n, &d.pM[b], 1, w[i0:], n)
		}
	}
	f := 0.0
	for r := 0; r < h; r++ {
		for _, v := range w[r*n+first : r*n+n] {
			f += v * v
		}
	}
	// Backward: Y_I = W_I L_II^-1 - Y_J+ (L_J+I L_II^-1), last block first.
	last := 0
	if d.cross {
		last = first
	}
	for i0 := (n - 1) / s * s; i0 >= 0 && i0+s > last; i0 -= s {
		b := i0 / s
		i1 := min(i0+s, n)
		beta := 0.0
		if i0 >= first {
			gm.DgemmPacked(gblas.NoTrans, h, w[i0:], n, &d.pInv[b], 0, y[i0:], n)
			beta = 1
		}
		if i1 < n {
			gm.DgemmPacked(gblas.NoTrans, h, y[i1:], n, &d.pN[b], beta, y[i0:], n)
		} else if beta == 0 {
			for r := 0; r < h; r++ {
				clear(y[r*n+i0 : r*n+i1])
			}
		}
	}
	// Gradient: (Y_I^T Y_[i0, i1+k))^T = Y_[i0, i1+k)^T Y_I for every
	// block, so the operand packed per product is the narrow Y_I.
	for b, off := range d.off {
		i0 := b * s
		i1 := min(i0+s, n)
		ld := min(n, i1+k) - i0
		if !d.cross {
			gm.Dgemm(gblas.Trans, gblas.NoTrans, ld, i1-i0, h, 1, y[i0:], n, y[i0:], n, 1, yy[off:], i1-i0)
		} else if i1 > first {
			gm.Dgemm(gblas.Trans, gblas.NoTrans, ld, i1-i0, h, 1, y[i0:], n, w[i0:], n, 1, yy[off:], i1-i0)
		}
	}
	return f
}
