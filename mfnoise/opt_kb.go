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
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

const (
	// defaultKBIter bounds the L-BFGS iterations of optimizeKB.
	defaultKBIter = 20000
	// kbMemory is the number of L-BFGS correction pairs. Each costs two
	// packed n(n+1)/2 vectors (16 MiB at n = 2000); at n = 1000, (10,100)
	// 4, 8 and 16 pairs took 350, 325 and 300 iterations.
	kbMemory = 8
	// kbBoundEvery is the number of iterations between dual bounds. A bound
	// costs two to three iterations (a polar decomposition, 0.7 s at
	// n = 2000) and is second order in the primal error, so it is only
	// worth computing once the iterate has moved.
	kbBoundEvery = 25
)

// KBFamily is the optimal dense encoder under (k,b)-participation
// (multi-epoch paper; see optimizeKB): L-BFGS with a proven lower bound,
// stopping at the certified gap set.Gap (default 1e-4).
type KBFamily struct{}

func (KBFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeKB(ctx, w, schema, set, kbToeplitzStart)
}

// optimizeKB computes the optimal (k,b)-participation factorization of the
// workload (multi-epoch paper Sec. 3, Eq. 6; SPEC 5.4):
//
//	min tr(A^T A X^-1)  s.t.  X PD,  sens^2 = max_j 1^T X[pi_j,pi_j] 1 <= 1.
//
// It solves the problem over the X whose columns that one example can join
// together are orthogonal (X_il = 0 for i != l in one pattern, the
// structure of the paper's Fig. 2 optimum), where the constraint reduces to
// the diagonal, sum_{i in pi_j} X_ii = 1, and is exact for vector
// contributions without requiring X >= 0. L-BFGS with a backtracking
// line search runs on the free entries of X from the best diagonal X,
// for a momentum or scheduled workload with the correlations of the
// optimal banded Toeplitz encoder with b bands (warmStart; about a
// quarter of the iterations); the
// gradient -X^-1 A^T A X^-1 is projected onto the constraint subspace
// (within-pattern entries zero, zero sum over each pattern's diagonal),
// the initial inverse Hessian is a diagonal preconditioner from the
// Hessian's diagonal, and a trial point that is not positive definite is
// rejected by the line search. An evaluation is one
// Cholesky factorization, two triangular solves and one symmetric rank-n
// update, all level-3 BLAS (call blas.Install in main to run them on the
// fast GEMM).
//
// Every kbBoundEvery iterations, the gradient gives Lagrange multipliers:
// W = X^-1 A^T A X^-1 kept on the pattern blocks, rescaled optimally, is
// dual feasible for Eq. 6 both with and without X >= 0 (Thm 3.1), so
// g(W) = 2 tr((A W A^T)^1/2) - sum_j max W[pi_j,pi_j] is a proven lower
// bound on the optimum; at the optimum W is exactly that block matrix and
// the bound is tight. It stops at the relative gap set.Gap (default
// 1e-4), fails after set.MaxIter iterations, and honours ctx.
//
// The encoder is the lower-triangular C with C^T C = X, normalized so
// sensitivity.Of(C, schema) = 1. Meta.Kind is "mf-kb" and Meta.Schema is
// schema. n need not equal k*b: patterns with fewer steps get the same
// unit budget.
//
// from is the start: the banded Toeplitz correlations (kbToeplitzStart,
// the default) or the best diagonal X (kbDiagonalStart, the method before
// warm starts, kept for the tests). The banded optimum with b bands (X =
// D C^T C D, D scaling each pattern's diagonal to sum 1: feasible, since
// C^T C vanishes within a pattern) was measured as a start and left out:
// at n = 600, (30,20), 4541 iterations and 176 CPU s against 1825 and 71
// (BENCHMARKS.md).
func optimizeKB(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings, from kbStart) (*Result, error) {
	start := time.Now()
	if err := guard.Memory("kb", w.N, kbMatrices); err != nil {
		return nil, err
	}
	a, err := optimizerWorkload("kb", w)
	if err != nil {
		return nil, err
	}
	n := w.N
	if schema.Kind != dpcore.KB {
		return nil, guard.Invalidf("optimize kb: schema %v is not (k,b)-participation (use the single or banded family)", schema)
	}
	if err := schema.Validate(n); err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	if err := checkCtx(ctx, "optimize kb"); err != nil {
		return nil, err
	}
	p := newKBPrimal(a, schema)
	x := p.start()
	switch from {
	case kbToeplitzStart:
		x, err = p.warmStart(ctx, w, schema, x)
	}
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	g := make([]float64, len(x))
	if _, ok := p.eval(x, g); !ok {
		return nil, fmt.Errorf("mfnoise: optimize kb: workload gives a non-finite loss at the start")
	}
	p.updatePreconditioner(x)
	prob := optimize.Problem{
		Func: func(x, g []float64) float64 {
			loss, ok := p.eval(x, g)
			if !ok {
				return math.Inf(1)
			}
			return loss
		},
		Precondition: p.precondition,
		Weight:       p.prec,
		Accepted:     p.updatePreconditioner,
		Bound:        p.lowerBound,
		BoundEvery:   kbBoundEvery,
		FirstStep:    p.firstStep,
	}
	run := optimize.Settings{Gap: set.GapOrDefault(), MaxIter: set.MaxIterOr(defaultKBIter)}
	if set != nil {
		run.Progress = set.Progress
	}
	res, err := optimize.Minimize(ctx, prob, x, &run, &optimize.LBFGS{Store: kbMemory})
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	lb, iter := res.LowerBound, res.Iterations
	if res.Status != optimize.Converged {
		return nil, fmt.Errorf("mfnoise: optimize kb: gap %.3g > %.3g after %d iterations (%v; loss %.6g, lower bound %.6g)", res.Gap, run.Gap, iter, res.Status, res.Loss, lb)
	}
	x = res.X
	xs := p.symmetric(x)
	c, err := lowerFactor(xs)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	sens, err := sensitivity.Of(c, schema)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	if !sens.Exact {
		return nil, fmt.Errorf("mfnoise: optimize kb: sensitivity of the optimum is not exact (%s)", sens.Method)
	}
	b, loss, err := normalizedDecoder(a, c, sens.Value)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	gap := optimize.RelGap(loss, lb)
	f, err := NewFactorization(w, c, b, Metadata{Kind: "mf-kb", Schema: schema, Loss: loss, LowerBnd: lb, Gap: gap})
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	return &Result{Factorization: f, Loss: loss, LowerBound: lb, Gap: gap, Iterations: iter, Status: res.Status, Elapsed: time.Since(start)}, nil
}

// kbStart is where optimizeKB starts.
type kbStart int

const (
	kbToeplitzStart kbStart = iota // warmStart
	kbDiagonalStart                // start
)

// kbPrimal evaluates tr(A^T A X^-1) and its projected gradient for the
// structured (k,b) problem. X is stored packed: the lower triangle row by
// row, entry (i,l), l <= i, at i(i+1)/2 + l, off-diagonal entries times
// sqrt 2 so that the plain dot product of packed vectors is the Frobenius
// inner product of the matrices: the projection onto the constraint
// subspace is then orthogonal, L-BFGS sees the geometry of X, and its
// vector operations are plain (parallel) dots and axpys.
type kbPrimal struct {
	n       int
	a       *mat.Dense
	at      []float64 // A^T, row-major n x n
	pat     []int     // pattern of each step
	members [][]int   // steps of each pattern, ascending

	full []float64 // X, then its Cholesky factor L (lower, row-major)
	z    []float64 // A^T, then L^-1 A^T, then X^-1 A^T
	w    []float64 // Z Z^T = X^-1 A^T A X^-1 (lower)

	// Scratch for the lower bound.
	k, u mat.Dense

	prec []float64 // diagonal preconditioner, packed like x
}

func newKBPrimal(a *mat.Dense, sc dpcore.Schema) *kbPrimal {
	n, _ := a.Dims()
	p := &kbPrimal{n: n, a: a, pat: make([]int, n), members: sc.Patterns(n)}
	for j, m := range p.members {
		for _, i := range m {
			p.pat[i] = j
		}
	}
	p.at = make([]float64, n*n)
	for i := 0; i < n; i++ {
		row := a.RawRowView(i)
		for j, v := range row {
			p.at[j*n+i] = v
		}
	}
	p.full = make([]float64, n*n)
	p.z = make([]float64, n*n)
	p.w = make([]float64, n*n)
	return p
}

func packedOffset(i int) int { return i * (i + 1) / 2 }

// parallelRows calls f on row ranges of the packed lower triangle with
// equal numbers of entries, in parallel.
func (p *kbPrimal) parallelRows(f func(lo, hi int)) {
	chunks := linalg.ParallelChunks(packedOffset(p.n))
	linalg.ParallelDo(chunks, func(c int) {
		lo := int(float64(p.n) * math.Sqrt(float64(c)/float64(chunks)))
		hi := int(float64(p.n) * math.Sqrt(float64(c+1)/float64(chunks)))
		if c == chunks-1 {
			hi = p.n
		}
		f(lo, hi)
	})
}

// start returns the best diagonal X: minimizing sum_i G_ii / X_ii subject
// to sum_{i in pi_j} X_ii = 1 gives X_ii proportional to sqrt(G_ii) =
// ||A e_i|| on each pattern. For workloads whose columns differ in scale
// (momentum, cooldown) it is far closer to the optimum than X = I/k.
func (p *kbPrimal) start() []float64 {
	x := make([]float64, packedOffset(p.n))
	norm := make([]float64, p.n)
	for i := 0; i < p.n; i++ {
		norm[i] = floats.Norm(p.at[i*p.n:(i+1)*p.n], 2)
	}
	for _, m := range p.members {
		sum := 0.0
		for _, i := range m {
			sum += norm[i]
		}
		for _, i := range m {
			x[packedOffset(i)+i] = norm[i] / sum
		}
	}
	return x
}

const sqrt2 = math.Sqrt2

// warmStart returns the start of optimizeKB (packed): the correlations of
// the optimal banded Toeplitz encoder with min(b, n) bands for the
// workload (toeplitzBandCoef, milliseconds) on the diagonal of x, the
// best diagonal X. It is feasible: a congruence of C^T C, so positive
// definite, with x's diagonal, and with fewer bands than the separation
// b no two steps of one pattern are correlated. It returns x itself for
// prefix sums, when an epoch has one batch, or when the start is no
// better than x. The start is the same for the same inputs, so the cache
// returns the same encoder however it was reached. At n = 600, (30,20),
// momentum 0.9 with cooldown, L-BFGS needed 1950 iterations from it
// against 7475 from x, and ended at a lower loss; for prefix sums, whose
// best diagonal is already close, it needed more (536 against 464 at
// n = 600, (30,20); 268 against 246 at n = 1000, (10,100)).
func (p *kbPrimal) warmStart(ctx context.Context, w dpcore.Workload, sc dpcore.Schema, x []float64) ([]float64, error) {
	n, bands := p.n, min(sc.B, p.n)
	if bands < 2 || w.Kind == dpcore.PrefixSumKind {
		return x, nil
	}
	c, err := toeplitzBandCoef(ctx, w, bands)
	if err != nil {
		return nil, err
	}
	diag, gram := bandedToeplitzGram(c, n)
	y := append([]float64(nil), x...)
	for j := 1; j < n; j++ {
		o := packedOffset(j)
		for d := 1; d < bands && d <= j; d++ {
			i := j - d
			y[o+i] = sqrt2 * math.Sqrt(x[packedOffset(i)+i]*x[o+j]/(diag[i]*diag[j])) * gram(j, d)
		}
	}
	g := make([]float64, len(x))
	fx, _ := p.eval(x, g)
	if fy, ok := p.eval(y, g); !ok || !(fy < fx) {
		return x, nil
	}
	return y, nil
}

// firstStep scales the first step (preconditioned steepest descent, with
// no curvature pairs yet) so that no diagonal entry of X moves by more
// than a quarter of the smallest one; later steps take L-BFGS's own scale.
func (p *kbPrimal) firstStep(x, d []float64) float64 {
	minDiag, maxD := math.Inf(1), 0.0
	for i := 0; i < p.n; i++ {
		minDiag = math.Min(minDiag, x[packedOffset(i)+i])
	}
	for _, v := range d {
		maxD = math.Max(maxD, math.Abs(v))
	}
	if maxD == 0 {
		return 1
	}
	return 0.25 * minDiag / maxD
}

// eval returns tr(A^T A X^-1) at the packed x and, if it is finite, writes
// the projected gradient to g. ok is false when x is not positive
// definite. It leaves X^-1 A^T A X^-1 in p.w for the lower bound.
func (p *kbPrimal) eval(x, g []float64) (loss float64, ok bool) {
	n := p.n
	p.parallelRows(func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o := packedOffset(i)
			row := p.full[i*n : i*n+i+1]
			for l, v := range x[o : o+i] {
				row[l] = v / sqrt2
			}
			row[i] = x[o+i]
		}
	})
	l := blas64.Triangular{Uplo: blas.Lower, Diag: blas.NonUnit, N: n, Stride: n, Data: p.full}
	if _, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Lower, N: n, Stride: n, Data: p.full}); !ok {
		return math.Inf(1), false
	}
	copy(p.z, p.at)
	z := blas64.General{Rows: n, Cols: n, Stride: n, Data: p.z}
	blas64.Trsm(blas.Left, blas.NoTrans, 1, l, z)
	loss = floats.Dot(p.z, p.z)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return math.Inf(1), false
	}
	blas64.Trsm(blas.Left, blas.Trans, 1, l, z)
	blas64.Syrk(blas.NoTrans, 1, z, 0, blas64.Symmetric{Uplo: blas.Lower, N: n, Stride: n, Data: p.w})
	// d/dy of the packed off-diagonal y = sqrt 2 X_il (which moves X_il
	// and X_li) is sqrt 2 times the matrix gradient entry.
	p.parallelRows(func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o := packedOffset(i)
			gi, wi := g[o:o+i+1], p.w[i*n:i*n+i+1]
			for l, v := range wi[:i] {
				gi[l] = -sqrt2 * v
			}
			gi[i] = -wi[i]
			for _, l := range p.members[p.pat[i]] {
				if l < i {
					gi[l] = 0
				}
			}
		}
	})
	// Zero-sum diagonal on each pattern keeps sum_{i in pi_j} X_ii = 1.
	for _, m := range p.members {
		mean := 0.0
		for _, i := range m {
			mean += g[packedOffset(i)+i]
		}
		mean /= float64(len(m))
		for _, i := range m {
			g[packedOffset(i)+i] -= mean
		}
	}
	return loss, true
}

// symmetric unpacks x.
func (p *kbPrimal) symmetric(x []float64) *mat.SymDense {
	s := mat.NewSymDense(p.n, nil)
	for i := 0; i < p.n; i++ {
		o := packedOffset(i)
		for l := 0; l < i; l++ {
			s.SetSym(l, i, x[o+l]/sqrt2)
		}
		s.SetSym(i, i, x[o+i])
	}
	return s
}

// lowerBound returns a proven lower bound on the (k,b) optimum from the
// multipliers at the last evaluated point (p.w = X^-1 A^T A X^-1):
// W = its pattern blocks, a block-diagonal matrix after permuting steps by
// pattern. With W_j = L_j L_j^T (k x k Cholesky) and M the lower-triangular
// matrix holding L_j at the rows and columns of pattern j, W = M M^T and
// tr((A W A^T)^1/2) is the sum of the singular values of the lower-
// triangular K = A M. The dual (Thm 3.1) at alpha W is
// 2 sqrt(alpha) T - alpha V, with V = sum_j max W[pi_j,pi_j] (the pattern
// multiplier must dominate every entry of its block when X >= 0 is imposed;
// without it, the excess is the multiplier of X_ii >= 0); its maximum over
// alpha is T^2 / V.
//
// Scaling each pattern's multipliers separately does better at no cost:
// W_s = M S^2 M^T, S = s_j on the columns of pattern j, is as feasible,
// with V(s) = sum_j s_j^2 v_j (v_j the largest entry of block j) and, for
// the polar factor U of K, T(s) = ||K S||_* >= tr(U^T K S) = sum_j s_j t_j,
// t_j the share of pattern j's columns in tr(U^T K). So the dual at
// alpha W_s is at least (sum_j s_j t_j)^2 / sum_j s_j^2 v_j, whose maximum,
// at s_j = t_j / v_j, is sum_j t_j^2 / v_j >= T^2 / V (Cauchy-Schwarz;
// s = 1 is the single alpha). Away from the optimum the patterns'
// multipliers are out of balance to first order in the iterate's error;
// the rescaling removes that part of the gap.
func (p *kbPrimal) lowerBound(ctx context.Context) (float64, error) {
	n := p.n
	factors := make([]*mat.TriDense, len(p.members)) // L_j
	vs := make([]float64, len(p.members))            // v_j
	for j, pt := range p.members {
		q := len(pt)
		blk := mat.NewSymDense(q, nil)
		diag := math.Inf(-1)
		for _, i := range pt {
			diag = math.Max(diag, p.w[i*n+i])
		}
		vj := diag
		for r := 0; r < q; r++ {
			blk.SetSym(r, r, diag)
			for c := 0; c < r; c++ {
				e := p.w[pt[r]*n+pt[c]]
				blk.SetSym(c, r, e)
				vj = math.Max(vj, e)
			}
		}
		var ch mat.Cholesky
		if !ch.Factorize(blk) {
			return 0, fmt.Errorf("multiplier block of pattern %d is not positive definite", p.pat[pt[0]]+1)
		}
		factors[j] = &mat.TriDense{}
		ch.LTo(factors[j])
		vs[j] = vj
	}
	// K = A M, lower triangular: K[i, pt[c]] = sum_{r >= c} A[i, pt[r]] L_j[r,c]
	// for pt[r] <= i.
	if p.k.IsEmpty() {
		p.k.ReuseAs(n, n)
	} else {
		p.k.Zero()
	}
	for i := 0; i < n; i++ {
		ai, ki := p.a.RawRowView(i), p.k.RawRowView(i)
		for j, pt := range p.members {
			lj := factors[j]
			for c := 0; c < len(pt) && pt[c] <= i; c++ {
				sum := 0.0
				for r := c; r < len(pt) && pt[r] <= i; r++ {
					sum += ai[pt[r]] * lj.At(r, c)
				}
				ki[pt[c]] = sum
			}
		}
	}
	if _, err := polarFactor(ctx, &p.u, &p.k, true); err != nil {
		return 0, err
	}
	// tr(U^T K) = sum_{r,c} U_rc K_rc is the trace of H, the sum of the
	// singular values of K; tc[c] is column c's share (K is lower
	// triangular).
	tc := make([]float64, n)
	for r := 0; r < n; r++ {
		ur, kr := p.u.RawRowView(r), p.k.RawRowView(r)
		for c, kv := range kr[:r+1] {
			tc[c] += ur[c] * kv
		}
	}
	bound := 0.0
	for j, pt := range p.members {
		tj := 0.0
		for _, c := range pt {
			tj += tc[c]
		}
		if !(vs[j] > 0) {
			return 0, fmt.Errorf("degenerate multipliers (pattern %d: block maximum %v)", p.pat[pt[0]]+1, vs[j])
		}
		bound += tj * tj / vs[j]
	}
	if !(bound > 0) {
		return 0, fmt.Errorf("degenerate multipliers (bound %v)", bound)
	}
	return bound, nil
}

// updatePreconditioner sets the diagonal preconditioner from the current
// point (x and p.w = X^-1 A^T A X^-1 of its evaluation). The Hessian of
// tr(G X^-1) along the packed coordinate of X_il is
// (X^-1)_ll W_ii + (X^-1)_ii W_ll + 2 (X^-1)_il W_il; with (X^-1)_ii taken
// as 1/X_ii and the cross term dropped, its inverse is a cheap diagonal
// preconditioner that undoes the scale differences between steps (the
// cooldown and momentum of a workload spread W's diagonal over orders of
// magnitude). Within-pattern entries, which are fixed at zero, get 0.
func (p *kbPrimal) updatePreconditioner(x []float64) {
	n := p.n
	if p.prec == nil {
		p.prec = make([]float64, len(x))
	}
	p.parallelRows(func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o := packedOffset(i)
			wi, xi := p.w[i*n+i], x[o+i]
			pr := p.prec[o : o+i+1]
			for l := 0; l < i; l++ {
				wl, xl := p.w[l*n+l], x[packedOffset(l)+l]
				pr[l] = 1 / (wi/xl + wl/xi)
			}
			pr[i] = xi / (2 * wi)
			for _, l := range p.members[p.pat[i]] {
				if l < i {
					pr[l] = 0
				}
			}
		}
	})
}

// precondition applies the preconditioner to d in place, keeping it in
// the constraint subspace: on each pattern's diagonal the result is
// P (q - mu) with mu the P-weighted mean, so its sum stays 0.
func (p *kbPrimal) precondition(d []float64) {
	linalg.ParallelRange(len(d), func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] *= p.prec[i]
		}
	})
	for _, m := range p.members {
		sd, sp := 0.0, 0.0
		for _, i := range m {
			o := packedOffset(i) + i
			sd += d[o]
			sp += p.prec[o]
		}
		mu := sd / sp
		for _, i := range m {
			o := packedOffset(i) + i
			d[o] -= p.prec[o] * mu
		}
	}
}
