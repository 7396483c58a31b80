package mfnoise

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// defaultSingleIter bounds the fixed-point iterations of optimizeSingle.
const defaultSingleIter = 1000

// SingleFamily is the optimal dense encoder under single participation
// (Denisov et al. 2022; see optimizeSingle): a fixed point with a proven
// lower bound, stopping at the certified gap set.Gap (default 1e-4).
type SingleFamily struct{}

func (SingleFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	if schema.Kind != dpcore.Single {
		return nil, guard.Invalidf("optimize single: schema %v is not single participation (use the kb family)", schema)
	}
	return optimizeSingle(ctx, w, set)
}

// optimizeSingle computes the optimal single-participation factorization of
// the workload (Denisov et al. 2022, Thm 3.2; SPEC 5.3): the minimizer of
// tr(A^T A X^-1) over positive definite X with X_ii <= 1, by the fixed point
// v <- phi(v) = diagpart(H), H = (D^1/2 A^T A D^1/2)^1/2, D = diag(v), from
// v = 1.
//
// Every iterate gives the lower bound tr(D (2 X(v) - I)) = 2 tr(H) - tr(D) on
// the optimum (Eq. 8) and a feasible point: X(v) = D^-1/2 H D^-1/2 rescaled to
// unit diagonal, X'_ij = H_ij / sqrt(H_ii H_jj), whose loss is within second
// order of the optimum near the fixed point (scaling by the largest diagonal
// entry instead is only first order). The iteration stops when the relative
// gap between the best of each is at most set.Gap, or fails after set.MaxIter
// iterations or when ctx is done. Progress is reported after each iteration.
// The iteration is accelerated by Anderson mixing in log v (any v > 0
// gives a valid bound and a feasible point): 6 iterations to gap 1e-4 for
// the prefix sum at n = 256 to 2048 instead of 11-12, 22 to 1e-10 at
// n = 1000 instead of 92, and 91 instead of 273 for a momentum and
// cooldown workload at n = 400.
//
// The encoder C is the lower-triangular factor with C^T C = X' (exchange-
// matrix Cholesky), so every column has unit norm (single-participation
// sensitivity 1); the decoder is B = A C^-1. Meta.Kind is "mf-single".
//
// H is the symmetric polar factor of K = A D^1/2 (K = U H), computed by the
// scaled Newton polar iteration: matrix inverses and products only, which in
// gonum run many times faster than a symmetric eigendecomposition (see
// BENCHMARKS.md).
func optimizeSingle(ctx context.Context, w dpcore.Workload, set *optimize.Settings) (*Result, error) {
	start := time.Now()
	if err := guard.Memory("single", w.N, singleMatrices); err != nil {
		return nil, err
	}
	a, err := optimizerWorkload("single", w)
	if err != nil {
		return nil, err
	}
	n := w.N
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	var ph polarPhi
	acc := newAnderson(n, andersonMemory)
	var bestC, bestB *mat.Dense
	bestLoss := math.Inf(1)
	step := func(iter int) (float64, float64, error) {
		if err := ph.compute(ctx, a, v); err != nil {
			return 0, 0, fmt.Errorf("iteration %d: %w", iter, err)
		}
		sumV := 0.0
		for _, x := range v {
			sumV += x
		}
		bound := 2*ph.tr - sumV // Eq. 8
		c, b, loss, err := ph.primal(a)
		if err != nil {
			return 0, 0, fmt.Errorf("iteration %d: %w", iter, err)
		}
		if loss < bestLoss {
			bestLoss, bestC, bestB = loss, c, b
		}
		acc.next(v, ph.diag) // phi(v), accelerated
		return loss, bound, nil
	}
	res, err := optimize.Iterate(ctx, optimize.Iteration{MaxIter: defaultSingleIter, Bounded: true, Step: step}, set)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize single: %w", err)
	}
	bestLB, gap, iter := res.LowerBound, res.Gap, res.Iterations
	if res.Status != optimize.Converged {
		return nil, fmt.Errorf("mfnoise: optimize single: gap %.3g > %.3g after %d iterations", gap, set.GapOrDefault(), iter)
	}
	f, err := NewFactorization(w, bestC, bestB, Metadata{Kind: "mf-single", Schema: dpcore.SingleParticipation(), Loss: bestLoss, LowerBnd: bestLB, Gap: gap})
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize single: %w", err)
	}
	return &Result{Factorization: f, Loss: bestLoss, LowerBound: bestLB, Gap: gap, Iterations: iter, Status: res.Status, Elapsed: time.Since(start)}, nil
}

// polarPhi evaluates phi(v) through the polar decomposition K = U H of
// K = A D^1/2: H = (K^T K)^1/2 = (D^1/2 A^T A D^1/2)^1/2.
type polarPhi struct {
	k, u mat.Dense
	diag []float64
	tr   float64
}

func (p *polarPhi) compute(ctx context.Context, a *mat.Dense, v []float64) error {
	n := len(v)
	p.k.CloneFrom(a)
	sq := make([]float64, n)
	for j, x := range v {
		sq[j] = math.Sqrt(x)
	}
	for i := 0; i < n; i++ {
		row := p.k.RawRowView(i)
		for j := range row {
			row[j] *= sq[j]
		}
	}
	if _, err := polarFactor(ctx, &p.u, &p.k, true); err != nil {
		return err
	}
	// H = U^T K: its diagonal and trace need only O(n^2) work.
	if p.diag == nil {
		p.diag = make([]float64, n)
	}
	for j := range p.diag {
		p.diag[j] = 0
	}
	for r := 0; r < n; r++ {
		ur, kr := p.u.RawRowView(r), p.k.RawRowView(r)
		for j := range p.diag {
			p.diag[j] += ur[j] * kr[j]
		}
	}
	p.tr = 0
	for j, d := range p.diag {
		if !(d > 0) {
			return fmt.Errorf("square root has diagonal entry %d = %.3g (singular workload?)", j+1, d)
		}
		p.tr += d
	}
	return nil
}

// primal returns the unit-diagonal feasible point X'_ij = H_ij / sqrt(H_ii
// H_jj) as its encoder C (lower triangular, C^T C = X'), decoder B = A C^-1
// and loss ||B||_F^2 (sens = 1).
func (p *polarPhi) primal(a *mat.Dense) (c, b *mat.Dense, loss float64, err error) {
	n := len(p.diag)
	var h mat.Dense
	h.Mul(p.u.T(), &p.k)
	x := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		hi := h.RawRowView(i)
		for j := i; j < n; j++ {
			// Symmetrize: round-off leaves U^T K slightly asymmetric.
			x.SetSym(i, j, 0.5*(hi[j]+h.At(j, i))/math.Sqrt(p.diag[i]*p.diag[j]))
		}
	}
	c, err = lowerFactor(x)
	if err != nil {
		return nil, nil, 0, err
	}
	b, loss, err = normalizedDecoder(a, c, maxColNorm(c))
	if err != nil {
		return nil, nil, 0, err
	}
	return c, b, loss, nil
}

// polarFactor computes the orthogonal polar factor U of the square
// nonsingular k (k = U H, H symmetric positive definite) into u by the
// Newton iteration X <- (z X + X^-T / z) / 2 with the scaling of Byers and
// Xu (SIAM J. Matrix Anal. Appl. 30(2), 2008), which needs only estimates of
// the extreme singular values of k and converges in a handful of steps for
// any condition number. If lower is set, k is lower triangular and the first
// inverse is a triangular one. It returns the number of steps.
func polarFactor(ctx context.Context, u, k *mat.Dense, lower bool) (int, error) {
	const maxSteps = 60
	n, _ := k.Dims()
	u.CloneFrom(k)
	var inv mat.Dense
	if lower {
		if err := lowerInverseOf(&inv, k); err != nil {
			return 0, fmt.Errorf("polar iteration: %w", err)
		}
	} else if err := inverseOf(&inv, u); err != nil {
		return 0, err
	}
	alpha := spectralNormEstimate(u)
	beta := 1 / spectralNormEstimate(&inv)
	z := 1 / math.Sqrt(alpha*beta)
	next := mat.NewDense(n, n, nil)
	for step := 1; step <= maxSteps; step++ {
		if err := ctx.Err(); err != nil {
			return step, err
		}
		if step > 1 {
			if err := inverseOf(&inv, u); err != nil {
				return step, err
			}
		}
		ur, ir, nr := u.RawMatrix(), inv.RawMatrix(), next.RawMatrix()
		diff, norm := 0.0, 0.0
		for i := 0; i < n; i++ {
			urow := ur.Data[i*ur.Stride : i*ur.Stride+n]
			nrow := nr.Data[i*nr.Stride : i*nr.Stride+n]
			for j := 0; j < n; j++ {
				x := 0.5 * (z*urow[j] + ir.Data[j*ir.Stride+i]/z)
				d := x - urow[j]
				diff += d * d
				norm += x * x
				nrow[j] = x
			}
		}
		u.Copy(next)
		rel := math.Sqrt(diff / norm)
		if math.IsNaN(rel) {
			return step, fmt.Errorf("polar iteration produced NaN")
		}
		// Quadratic convergence: the error after this step is about rel^2,
		// far below what the fixed point and its bound need.
		if rel < 1e-6 {
			return step, nil
		}
		if step == 1 {
			z = math.Sqrt(2 * math.Sqrt(alpha*beta) / (alpha + beta))
		} else {
			z = 1 / math.Sqrt((z+1/z)/2)
		}
	}
	return maxSteps, fmt.Errorf("polar iteration did not converge in %d steps", maxSteps)
}

// inverseOf sets dst = a^-1 by LU factorization (linalg.LUFactor) and two
// triangular solves against the identity: level-3 throughout, so more than
// twice as fast as mat.Dense.Inverse, whose Dgetri inverts U with gonum's
// unblocked Dtrmm.
func inverseOf(dst, a *mat.Dense) error {
	n, _ := a.Dims()
	lu := mat.DenseCopyOf(a)
	ipiv := make([]int, n)
	if raw := lu.RawMatrix(); !linalg.LUFactor(n, raw.Data, raw.Stride, ipiv) {
		return fmt.Errorf("polar iteration: matrix is singular")
	}
	setIdentity(dst, n)
	lapack64.Getrs(blas.NoTrans, lu.RawMatrix(), dst.RawMatrix(), ipiv)
	return nil
}

// lowerInverseOf sets dst = l^-1 for the lower triangle of l by one
// triangular solve against the identity.
func lowerInverseOf(dst, l *mat.Dense) error {
	n, _ := l.Dims()
	for i := 0; i < n; i++ {
		if !(l.At(i, i) != 0) {
			return fmt.Errorf("triangular matrix is singular at %d", i+1)
		}
	}
	setIdentity(dst, n)
	lr := l.RawMatrix()
	blas64.Trsm(blas.Left, blas.NoTrans, 1, blas64.Triangular{Uplo: blas.Lower, Diag: blas.NonUnit, N: n, Stride: lr.Stride, Data: lr.Data}, dst.RawMatrix())
	return nil
}

func setIdentity(dst *mat.Dense, n int) {
	if dst.IsEmpty() {
		dst.ReuseAs(n, n)
	} else {
		dst.Zero()
	}
	for i := 0; i < n; i++ {
		dst.Set(i, i, 1)
	}
}

// spectralNormEstimate returns ||a||_2 to a few digits by power iteration on
// a^T a; the polar scaling only needs an estimate.
func spectralNormEstimate(a *mat.Dense) float64 {
	n, _ := a.Dims()
	x := mat.NewVecDense(n, nil)
	for i := 0; i < n; i++ {
		// A fixed, non-symmetric start vector avoids orthogonality to the
		// top singular vector for structured matrices.
		x.SetVec(i, 1+float64(i%7)/7)
	}
	var y, t mat.VecDense
	est := 0.0
	for it := 0; it < 30; it++ {
		nx := mat.Norm(x, 2)
		x.ScaleVec(1/nx, x)
		y.MulVec(a, x)
		t.MulVec(a.T(), &y)
		e := math.Sqrt(mat.Norm(&t, 2))
		if it > 3 && math.Abs(e-est) < 1e-3*e {
			return e
		}
		est = e
		x.CopyVec(&t)
	}
	return est
}

// andersonMemory is the number of past iterates Anderson mixing combines.
const andersonMemory = 5

// anderson accelerates the fixed point v <- phi(v) by Anderson mixing
// (type II; Walker and Ni, SIAM J. Numer. Anal. 49(4), 2011) in log
// coordinates u = log v, so every iterate stays positive, which is all
// the Eq. 8 bound and the feasible point need: any v > 0 gives a valid
// bound and a feasible X, so acceleration can slow convergence but never
// make a result wrong.
type anderson struct {
	m      int
	u, f   []float64   // current log v and residual log phi(v) - log v
	du, df [][]float64 // differences of past u and f, newest last
	have   bool
}

func newAnderson(n, m int) *anderson {
	return &anderson{m: m, u: make([]float64, n), f: make([]float64, n)}
}

// next replaces v by the accelerated iterate, given phiV = phi(v).
func (a *anderson) next(v, phiV []float64) {
	n := len(v)
	u := make([]float64, n)
	f := make([]float64, n)
	for i := range v {
		u[i] = math.Log(v[i])
		f[i] = math.Log(phiV[i]) - u[i]
	}
	if a.have {
		du, df := make([]float64, n), make([]float64, n)
		for i := range u {
			du[i] = u[i] - a.u[i]
			df[i] = f[i] - a.f[i]
		}
		a.du = append(a.du, du)
		a.df = append(a.df, df)
		if len(a.du) > a.m {
			a.du, a.df = a.du[1:], a.df[1:]
		}
	}
	copy(a.u, u)
	copy(a.f, f)
	a.have = true
	k := len(a.df)
	next := make([]float64, n)
	for i := range next {
		next[i] = u[i] + f[i] // the plain step
	}
	if k > 0 {
		dfm := mat.NewDense(n, k, nil)
		for j, col := range a.df {
			dfm.SetCol(j, col)
		}
		var gamma mat.VecDense
		if err := gamma.SolveVec(dfm, mat.NewVecDense(n, f)); err == nil {
			for j := 0; j < k; j++ {
				gj := gamma.AtVec(j)
				for i := range next {
					next[i] -= gj * (a.du[j][i] + a.df[j][i])
				}
			}
		}
	}
	for i := range v {
		v[i] = math.Exp(next[i])
	}
}
