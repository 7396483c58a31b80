package mfnoise

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// defaultBandedIter bounds the L-BFGS iterations of OptimizeBanded.
const defaultBandedIter = 20000

// OptimizeBanded computes the banded matrix factorization of the workload
// (banded-MF paper, Problem 2; SPEC 5.5): it minimizes tr(A^T A X^-1) over
// symmetric positive definite X with X_ii = 1 and X_ij = 0 for |i-j| >= bands,
// by L-BFGS over the free entries X_ij, 0 < |i-j| < bands. The gradient is
// -2 (X^-1 A^T A X^-1)_ij per free entry (each appears twice in X).
//
// The start is deterministic: X = C^T C of the optimal banded Toeplitz
// encoder with the same band count (OptimizeToeplitz), columns normalized
// (see warmStart), so the same inputs give the same encoder however the
// build was reached. L-BFGS runs on variables scaled by the inverse square
// root of the Hessian's diagonal at the start (see preconditioner): the
// curvature of the entries spans the diagonal of A^T A (n to 1 for prefix
// sums), and unscaled L-BFGS needed about five times the iterations.
//
// The band is exploited throughout (evalBlocked): X is factored by a
// banded Cholesky (O(n bands^2)) and A X^-1 by blocked banded solves and
// only the band of the gradient is formed, all at GEMM speed, so an
// evaluation costs O(n^2 bands) instead of O(n^3).
//
// The encoder C is lower triangular and b-banded with C^T C = X (exchange-
// matrix Cholesky, banded-MF Prop. 4.1); its columns have unit norm, so its
// sensitivity is 1 under single participation and sqrt(k) under (k,b) and
// (k,b)-min-separation participation whenever bands <= b. The decoder is
// B = A C^-1. bands = 1 is DP-SGD. The method gives no lower bound:
// LowerBound and Gap are 0, and s.Gap (default 1e-4) sets the stopping rule,
// a relative loss decrease below s.Gap/100 over 10 iterations.
// Meta.Kind is "bandmf" and Meta.Bands is bands.
func OptimizeBanded(ctx context.Context, w Workload, bands int, s *OptimizeSettings) (*OptimizeResult, error) {
	return optimizeBanded(ctx, w, bands, s, false)
}

// optimizeBanded is OptimizeBanded; cold starts from X = I without the
// preconditioner (the method before warm starts, kept for the tests).
func optimizeBanded(ctx context.Context, w Workload, bands int, s *OptimizeSettings, cold bool) (*OptimizeResult, error) {
	start := time.Now()
	a, err := optimizerWorkload("banded", w, s)
	if err != nil {
		return nil, err
	}
	n := w.N
	if bands <= 0 || bands > n {
		return nil, invalidf("optimize banded: bands = %d must lie in [1, n=%d]", bands, n)
	}
	p := newBandProblem(a, bands)
	x0 := make([]float64, p.dim())
	if !cold {
		if x0, err = p.warmStart(ctx, w); err != nil {
			return nil, fmt.Errorf("mfnoise: optimize banded: %w", err)
		}
	}
	iters := 0
	if p.dim() > 0 {
		conv := &bandConverger{
			ctx: ctx, s: s, window: 10, rel: s.gap() / 100, maxIter: s.maxIter(defaultBandedIter),
		}
		settings := &optimize.Settings{
			Converger:       conv,
			MajorIterations: conv.maxIter,
		}
		scale := make([]float64, len(x0))
		for i := range scale {
			scale[i] = 1
		}
		if !cold {
			scale = p.preconditioner(x0)
		}
		xs := make([]float64, len(x0))
		toX := func(y []float64) []float64 {
			for i := range y {
				xs[i] = x0[i] + scale[i]*y[i]
			}
			return xs
		}
		prob := optimize.Problem{
			Func: func(y []float64) float64 { return p.eval(toX(y), nil) },
			Grad: func(g, y []float64) {
				p.eval(toX(y), g)
				for i := range g {
					g[i] *= scale[i]
				}
			},
		}
		res, err := optimize.Minimize(prob, make([]float64, len(x0)), settings, &optimize.LBFGS{Store: 30})
		if cerr := checkCtx(ctx, "optimize banded"); cerr != nil {
			return nil, cerr
		}
		if err != nil && res == nil {
			return nil, fmt.Errorf("mfnoise: optimize banded: %w", err)
		}
		// A line-search failure after progress still leaves a feasible,
		// improved X; only a non-finite result is an error.
		if res == nil || math.IsInf(res.F, 0) || math.IsNaN(res.F) {
			return nil, fmt.Errorf("mfnoise: optimize banded: no finite solution (%v)", err)
		}
		if res.Status == optimize.IterationLimit {
			return nil, fmt.Errorf("mfnoise: optimize banded: no convergence in %d iterations", settings.MajorIterations)
		}
		copy(x0, toX(res.X))
		iters = res.Stats.MajorIterations
	}
	x := p.band(x0)
	c, err := lowerFactor(x)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize banded: %w", err)
	}
	// The exchange-matrix Cholesky of a banded X is banded in exact
	// arithmetic and the computed entries outside the band are exact zeros
	// (sums of products of zeros); enforce it so the streaming recursion
	// and the sensitivity theorem see a banded C.
	for i := 0; i < n; i++ {
		row := c.RawRowView(i)
		for j := 0; j <= i-bands; j++ {
			row[j] = 0
		}
	}
	b, loss, err := normalizedDecoder(a, c, maxColNorm(c))
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize banded: %w", err)
	}
	f, err := NewFactorization(w, c, b, Metadata{Kind: "bandmf", Bands: bands, Loss: loss})
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize banded: %w", err)
	}
	s.report(OptimizeProgress{Iter: iters, Loss: loss, MaxIter: s.maxIter(defaultBandedIter)})
	return &OptimizeResult{Factorization: f, Loss: loss, Iterations: iters, Elapsed: time.Since(start)}, nil
}

// bandProblem evaluates tr(A^T A X^-1) and its gradient over the free
// entries of a banded X with unit diagonal. Free entry (d, i) is X[i, i-d]
// for d = 1..bands-1, i = d..n-1, stored d-major.
type bandProblem struct {
	a    *mat.Dense
	n, k int // k = bands - 1, the half bandwidth
	xb   *mat.SymBandDense
	ch   mat.BandCholesky
	// Cache of the last evaluation: L-BFGS asks for F and G at one point.
	lastX []float64
	lastF float64
	lastG []float64
	ok    bool
	// dense holds the work matrices of the GEMM-bound evaluation used
	// for wide bands (opt_banded_dense.go).
	dense *denseBandEval
	// blocked holds the work of the blocked banded evaluation
	// (opt_banded_blocked.go).
	blocked *blockedBandEval
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
	if p.ok && floats.Equal(x, p.lastX) {
		if g != nil {
			copy(g, p.lastG)
		}
		return p.lastF
	}
	p.fill(x)
	p.ok = false
	if p.lastX == nil {
		p.lastX = make([]float64, len(x))
		p.lastG = make([]float64, len(x))
	}
	copy(p.lastX, x)
	if path := p.evalPath(); path != pathSolves {
		var f float64
		var ok bool
		if path == pathDense {
			f, ok = p.evalDense(p.lastG)
		} else {
			f, ok = p.evalBlocked(p.lastG)
		}
		if !ok {
			f = math.Inf(1)
		}
		if !ok {
			for i := range p.lastG {
				p.lastG[i] = math.NaN()
			}
		}
		p.lastF, p.ok = f, true
		if g != nil {
			copy(g, p.lastG)
		}
		return f
	}
	if !p.ch.Factorize(p.xb) {
		p.lastF = math.Inf(1)
		for i := range p.lastG {
			p.lastG[i] = math.NaN()
		}
		p.ok = true
		if g != nil {
			copy(g, p.lastG)
		}
		return p.lastF
	}
	// Row r of Z = A X^-1 solves X z_r = a_r: contiguous banded solves,
	// split over goroutines. tr(A X^-1 A^T) = sum_r a_r . z_r and
	// d/dX_il tr(G X^-1) = -(Z^T Z)_il, accumulated row by row.
	workers := min(runtime.GOMAXPROCS(0), p.n)
	fs := make([]float64, workers)
	gs := make([][]float64, workers)
	var wg sync.WaitGroup
	for wk := 0; wk < workers; wk++ {
		gs[wk] = make([]float64, len(p.lastG))
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
	f := floats.Sum(fs)
	for i := range p.lastG {
		sum := 0.0
		for wk := range gs {
			sum += gs[wk][i]
		}
		p.lastG[i] = -2 * sum
	}
	p.lastF = f
	p.ok = true
	if g != nil {
		copy(g, p.lastG)
	}
	return f
}

// bandConverger stops L-BFGS when the loss improved by less than rel
// (relative) over window major iterations, reports progress, and stops on a
// cancelled context.
type bandConverger struct {
	ctx    context.Context
	s      *OptimizeSettings
	window int
	rel    float64
	hist   []float64
	iter   int
	// maxIter is the bound on major iterations, reported with progress.
	maxIter int
}

func (c *bandConverger) Init(int) { c.hist = c.hist[:0]; c.iter = 0 }

func (c *bandConverger) Converged(loc *optimize.Location) optimize.Status {
	if c.ctx.Err() != nil {
		return optimize.Failure
	}
	c.iter++
	c.s.report(OptimizeProgress{Iter: c.iter, Loss: loc.F, MaxIter: c.maxIter})
	c.hist = append(c.hist, loc.F)
	if len(c.hist) > c.window {
		old := c.hist[len(c.hist)-1-c.window]
		if old-loc.F <= c.rel*math.Abs(loc.F) {
			return optimize.FunctionConvergence
		}
	}
	return optimize.NotTerminated
}

// warmStart is the deterministic starting point of OptimizeBanded: the
// banded Toeplitz optimum for the same band count (OptimizeToeplitz under
// single participation, for the workload's momentum at a constant rate when
// its schedule varies), as the X = C^T C it induces with the diagonal scaled
// to 1 (columns normalized), or X = I when that is no better. The same
// inputs always give the same start, so an optimized encoder does not
// depend on how the build was reached.
func (p *bandProblem) warmStart(ctx context.Context, w Workload) ([]float64, error) {
	x0 := make([]float64, p.dim())
	if p.k == 0 {
		return x0, nil
	}
	c, err := toeplitzBandCoef(ctx, w, p.k+1)
	if err != nil {
		return nil, err
	}
	n, bands := p.n, p.k+1
	diag := make([]float64, n)
	for i := range diag {
		for s := 0; s <= min(bands-1, n-1-i); s++ {
			diag[i] += c[s] * c[s]
		}
	}
	idx := 0
	for d := 1; d <= p.k; d++ {
		for j := d; j < n; j++ {
			i := j - d
			v := 0.0
			for s := 0; s <= min(bands-1-d, n-1-j); s++ {
				v += c[s] * c[s+d]
			}
			x0[idx] = v / math.Sqrt(diag[i]*diag[j])
			idx++
		}
	}
	id := make([]float64, len(x0))
	if fi, fw := p.eval(id, nil), p.eval(x0, nil); !(fw < fi) {
		return id, nil
	}
	return x0, nil
}

// toeplitzBandCoef returns the coefficients c_0..c_{bands-1} of the banded
// Toeplitz encoder OptimizeToeplitz finds for w under single participation
// (for momentum at a constant rate when w's schedule varies, as
// BandedToeplitz.Build does).
func toeplitzBandCoef(ctx context.Context, w Workload, bands int) ([]float64, error) {
	ow, err := toeplitzProxyWorkload(w)
	if err != nil {
		return nil, err
	}
	res, err := OptimizeToeplitz(ctx, ow, SingleParticipation(), bands, nil)
	if err != nil {
		return nil, err
	}
	return res.Mechanism.Column(), nil
}

// toeplitzProxyWorkload is the Toeplitz workload the Toeplitz optimizers
// use for w: w itself, or under a time-varying schedule the same momentum
// at a constant rate.
func toeplitzProxyWorkload(w Workload) (Workload, error) {
	eta, err := workloadRates(w)
	if err != nil {
		return Workload{}, err
	}
	if eta != nil && !constantRates(eta) {
		return Workload{Kind: MomentumKind, N: w.N, Momentum: w.Momentum, Schedule: ConstantSchedule(1)}, nil
	}
	return w, nil
}

// preconditioner returns the scale s of the change of variables x = x0 +
// s .* y that L-BFGS optimizes over: s = H^(-1/2) for the diagonal H of
// the Hessian at x0, d^2 f / d x_ij^2 = 2 (W_jj M_ii + W_ii M_jj + 2 W_ij
// M_ij) with W = X^-1 and M = W G W (each free entry appears twice in X).
// The diagonal of G = A^T A spans n to 1 for prefix sums, and so does the
// curvature; unscaled, L-BFGS needs thousands of iterations.
func (p *bandProblem) preconditioner(x0 []float64) []float64 {
	n := p.n
	scale := make([]float64, len(x0))
	for i := range scale {
		scale[i] = 1
	}
	xd := p.band(x0)
	var ch mat.Cholesky
	if !ch.Factorize(xd) {
		return scale
	}
	var wi mat.SymDense
	if err := ch.InverseTo(&wi); err != nil {
		return scale
	}
	var t mat.Dense
	t.Mul(p.a, &wi)
	var m mat.SymDense
	m.SymOuterK(1, t.T())
	idx := 0
	for off := 1; off <= p.k; off++ {
		for j := off; j < n; j++ {
			i := j - off
			h := 2 * (wi.At(j, j)*m.At(i, i) + wi.At(i, i)*m.At(j, j) + 2*wi.At(i, j)*m.At(i, j))
			if h > 0 && !math.IsInf(h, 0) {
				scale[idx] = 1 / math.Sqrt(h)
			}
			idx++
		}
	}
	return scale
}
