package mfnoise

import (
	"context"
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// defaultKBIter bounds the L-BFGS iterations of OptimizeKB.
const defaultKBIter = 5000

// OptimizeKB computes the optimal (k,b)-participation factorization of the
// workload (multi-epoch paper Sec. 3, Eq. 6 with X >= 0; SPEC 5.4):
//
//	min tr(A^T A X^-1)  s.t.  X PD, X >= 0 elementwise, 1^T X[pi_j,pi_j] 1 <= 1.
//
// It maximizes a Lagrange dual (Thm 3.1): for multipliers v_j >= 0 of the
// pattern constraints and Lambda >= 0 of X >= 0, with W = sum_j v_j u_j u_j^T
// - Lambda positive definite, g = 2 tr((W^1/2 A^T A W^1/2)^1/2) - sum_j v_j is
// a lower bound on the optimum, attained by X(W) = W^-1/2 (W^1/2 A^T A
// W^1/2)^1/2 W^-1/2. At the optimum, columns of C that one example can join
// together are orthogonal (X is zero inside a pattern off the diagonal, the
// paper's Fig. 2), so W is supported on the diagonal and the within-pattern
// entries. L-BFGS maximizes the smooth dual of that structured problem over
// exactly those entries; every iterate is converted to a valid (v, Lambda) to
// report a lower bound for Eq. 6 itself, and to a feasible X (within-pattern
// entries zeroed, per-step rescaling so each pattern sums to 1) for the loss.
// It stops at the relative gap s.Gap (default 1e-4).
//
// Where X >= 0 is active off the patterns too (small negative entries of
// X(W)), the feasible point clips them, and if that leaves a gap, multipliers
// for those entries are added (an active set) and L-BFGS continues.
//
// The encoder is the lower-triangular C with C^T C = X, normalized so
// Sensitivity(C, schema) = 1, exact because X >= 0. OptimizeKB is validated
// on the prefix-sum workload; for momentum workloads the dual can stall
// (W leaves the positive definite cone along the search direction) and
// OptimizeKB then fails with an error rather than report an unproven loss;
// use OptimizeBanded for those. Meta.Kind is "mf-kb" and Meta.Schema is
// schema.
func OptimizeKB(ctx context.Context, w Workload, schema Schema, s *OptimizeSettings) (*OptimizeResult, error) {
	start := time.Now()
	if err := s.validate(); err != nil {
		return nil, err
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	n := w.N
	if schema.Kind != KB {
		return nil, invalidf("optimize kb: schema %v is not (k,b)-participation (use OptimizeSingle or OptimizeBanded)", schema)
	}
	if err := schema.Validate(n); err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	p := newKBDual(ctx, a, schema)
	target := s.gap()
	conv := &kbConverger{p: p, s: s, target: target}
	maxIter := s.maxIter(defaultKBIter)
	settings := &optimize.Settings{Converger: conv, MajorIterations: maxIter}
	prob := optimize.Problem{
		Func: func(z []float64) float64 { return p.eval(z, nil) },
		Grad: func(g, z []float64) { p.eval(z, g) },
	}
	z0 := make([]float64, p.dim())
	for j := 0; j < p.npat; j++ {
		// v_j = k^2 scales the single-participation start v = 1 to the
		// per-step budget X_ii = 1/k.
		z0[j] = 2 * math.Log(float64(schema.K))
	}
	// The initial point is a major iteration too: report and test it.
	p.eval(z0, nil)
	if st := conv.Converged(&optimize.Location{X: z0}); st == optimize.NotTerminated {
		// Active set: when L-BFGS stops short of the gap because X >= 0 is
		// active off the patterns, add multipliers for the pairs where X(W)
		// went negative and continue from the same point.
		z := z0
		for round := 0; round < 20; round++ {
			var res *optimize.Result
			res, err = optimize.Minimize(prob, z, settings, &optimize.LBFGS{Store: 30})
			if conv.done() || ctx.Err() != nil || res == nil || conv.iter >= maxIter {
				break
			}
			settings.MajorIterations = maxIter - conv.iter
			p.eval(res.X, nil)
			neg := p.negativePairs()
			if len(neg) == 0 {
				break
			}
			z = append(append([]float64(nil), res.X...), make([]float64, len(neg))...)
			// New multipliers start near zero so the restart point keeps W
			// positive definite.
			for m := len(res.X); m < len(z); m++ {
				z[m] = math.Log(1e-9)
			}
			p.addNeg(neg)
		}
	}
	if cerr := checkCtx(ctx, "optimize kb"); cerr != nil {
		return nil, cerr
	}
	if conv.best == nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: no positive definite feasible iterate; lower bound %.6g (%v)", conv.lb, err)
	}
	gap := relGap(conv.bestLoss, conv.lb)
	if gap > target {
		return nil, fmt.Errorf("mfnoise: optimize kb: gap %.3g > %.3g after %d iterations (loss %.6g, lower bound %.6g; %v)", gap, target, conv.iter, conv.bestLoss, conv.lb, err)
	}
	c := conv.best
	sens, err := Sensitivity(c, schema)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	if !sens.Exact {
		return nil, fmt.Errorf("mfnoise: optimize kb: encoder Gram matrix is not nonnegative; sensitivity not exact")
	}
	c.Scale(1/sens.Value, c)
	b, err := decoderFor(a, c)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	fro := mat.Norm(b, 2)
	loss := fro * fro
	gap = relGap(loss, conv.lb)
	f, err := NewFactorization(w, c, b, Metadata{Kind: "mf-kb", Schema: schema, Loss: loss, LowerBnd: conv.lb, Gap: gap})
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize kb: %w", err)
	}
	return &OptimizeResult{Factorization: f, Loss: loss, LowerBound: conv.lb, Gap: gap, Iterations: conv.iter, Elapsed: time.Since(start)}, nil
}

// kbDual evaluates the dual of the structured (k,b) problem
//
//	min tr(G X^-1)  s.t.  sum_{i in pi_j} X_ii <= 1,  X_il = 0 (i != l in one pattern),
//
// whose multipliers make W = sum_j v_j u_j u_j^T restricted to the diagonal
// plus the within-pattern entries mu_il. Variables: s_j = log v_j for each
// pattern, then t_p for each within-pattern pair p = (i,l), i < l, with
// W_il = v_j t_p.
type kbDual struct {
	ctx   context.Context
	a     *mat.Dense
	n     int
	pat   []int // pattern of each step
	npat  int   // number of patterns
	pairs [][2]int
	// neg holds off-pattern pairs where X >= 0 was found active, with
	// multipliers lambda_m = exp(r_m) sqrt(v_j v_j') >= 0 and W_il = -lambda_m.
	neg [][2]int
	lam []float64

	w    *mat.SymDense
	chol mat.Cholesky
	u, l *mat.TriDense
	k, q mat.Dense
	x    *mat.Dense // X(W)
	v    []float64  // v_j of each pattern
	mu   []float64  // W_il of each pair
	trP  float64

	lastZ, lastG []float64
	lastF        float64
	ok           bool
}

func newKBDual(ctx context.Context, a *mat.Dense, sc Schema) *kbDual {
	n, _ := a.Dims()
	p := &kbDual{ctx: ctx, a: a, n: n, pat: make([]int, n)}
	pats := sc.Patterns(n)
	p.npat = len(pats)
	for j, pt := range pats {
		for x, i := range pt {
			p.pat[i] = j
			for _, l := range pt[x+1:] {
				p.pairs = append(p.pairs, [2]int{i, l})
			}
		}
	}
	p.w = mat.NewSymDense(n, nil)
	p.x = mat.NewDense(n, n, nil)
	p.u = mat.NewTriDense(n, mat.Upper, nil)
	p.l = mat.NewTriDense(n, mat.Lower, nil)
	p.v = make([]float64, p.npat)
	p.mu = make([]float64, len(p.pairs))
	return p
}

func (p *kbDual) dim() int { return p.npat + len(p.pairs) + len(p.neg) }

// negativePairs returns the off-pattern pairs (i < l) not yet in p.neg where
// the current X(W) is negative beyond round-off.
func (p *kbDual) negativePairs() [][2]int {
	have := make(map[[2]int]bool, len(p.neg))
	for _, pr := range p.neg {
		have[pr] = true
	}
	var out [][2]int
	for i := 0; i < p.n; i++ {
		row := p.x.RawRowView(i)
		for l := i + 1; l < p.n; l++ {
			if p.pat[i] != p.pat[l] && row[l] < -1e-9*math.Sqrt(row[i]*p.x.At(l, l)) && !have[[2]int{i, l}] {
				out = append(out, [2]int{i, l})
			}
		}
	}
	return out
}

// addNeg adds multipliers for the pairs and invalidates the cache.
func (p *kbDual) addNeg(pairs [][2]int) {
	p.neg = append(p.neg, pairs...)
	p.lam = make([]float64, len(p.neg))
	p.lastZ, p.lastG, p.ok = nil, nil, false
}

// eval returns -g_r(z), the negated smooth dual of the structured problem,
// and its gradient into g if not nil. Points where W is not positive
// definite have value +Inf.
func (p *kbDual) eval(z, g []float64) float64 {
	if p.ok && floats.Equal(z, p.lastZ) {
		if g != nil {
			copy(g, p.lastG)
		}
		return p.lastF
	}
	if p.lastZ == nil {
		p.lastZ = make([]float64, len(z))
		p.lastG = make([]float64, len(z))
	}
	copy(p.lastZ, z)
	p.ok = true
	p.lastF = p.evalAt(z)
	if g != nil {
		copy(g, p.lastG)
	}
	return p.lastF
}

func (p *kbDual) evalAt(z []float64) float64 {
	n := p.n
	inf := func() float64 {
		for i := range p.lastG {
			p.lastG[i] = 0
		}
		p.trP = math.NaN()
		return math.Inf(1)
	}
	for i := range p.w.RawSymmetric().Data {
		p.w.RawSymmetric().Data[i] = 0
	}
	nv := p.npat
	for j := range p.v {
		p.v[j] = math.Exp(z[j])
	}
	for i := 0; i < n; i++ {
		p.w.SetSym(i, i, p.v[p.pat[i]])
	}
	for k, pr := range p.pairs {
		p.mu[k] = p.v[p.pat[pr[0]]] * z[nv+k]
		p.w.SetSym(pr[0], pr[1], p.mu[k])
	}
	off := nv + len(p.pairs)
	for m, pr := range p.neg {
		p.lam[m] = math.Exp(z[off+m]) * math.Sqrt(p.v[p.pat[pr[0]]]*p.v[p.pat[pr[1]]])
		p.w.SetSym(pr[0], pr[1], -p.lam[m])
	}
	if !p.chol.Factorize(p.w) {
		return inf()
	}
	// W = L L^T with L = U^T lower triangular; K = A L is lower triangular
	// and (L^T G L)^1/2 is the symmetric polar factor P of K.
	p.chol.UTo(p.u)
	ur, lr0 := p.u.RawTriangular(), p.l.RawTriangular()
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			lr0.Data[j*lr0.Stride+i] = ur.Data[i*ur.Stride+j]
		}
	}
	p.k.Mul(p.a, p.l)
	if _, err := polarFactor(p.ctx, &p.q, &p.k, true); err != nil {
		// Cancellation is reported by the caller; a failed polar
		// decomposition means W is too close to singular: outside.
		return inf()
	}
	p.x.Mul(p.q.T(), &p.k) // P
	p.trP = 0
	for i := 0; i < n; i++ {
		p.trP += p.x.At(i, i)
	}
	// X = L^-T P L^-1 (two triangular solves), then symmetrized.
	lr := p.l.RawTriangular()
	lt := blas64.Triangular{Uplo: blas.Lower, Diag: blas.NonUnit, N: n, Stride: lr.Stride, Data: lr.Data}
	xr := p.x.RawMatrix()
	blas64.Trsm(blas.Right, blas.NoTrans, 1, lt, xr)
	blas64.Trsm(blas.Left, blas.Trans, 1, lt, xr)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			v := 0.5 * (xr.Data[i*xr.Stride+j] + xr.Data[j*xr.Stride+i])
			xr.Data[i*xr.Stride+j], xr.Data[j*xr.Stride+i] = v, v
		}
	}
	// dg/dW_ab = X_ab (multi-epoch paper Cor. 3.1); a within-pattern pair
	// enters W twice. With W_ii = v_j and W_il = v_j t_p:
	// dg/ds_j = v_j (sum_{i in pi_j} X_ii - 1 + sum_{p in j} 2 X_il t_p),
	// dg/dt_p = 2 X_il v_j.
	gr := 2 * p.trP
	for j, v := range p.v {
		gr -= v
		p.lastG[j] = 1
	}
	for i := 0; i < n; i++ {
		p.lastG[p.pat[i]] -= p.x.At(i, i)
	}
	for k, pr := range p.pairs {
		j := p.pat[pr[0]]
		xil := p.x.At(pr[0], pr[1])
		p.lastG[j] -= 2 * xil * z[nv+k]
		p.lastG[nv+k] = -2 * xil * p.v[j]
	}
	// W_il = -lambda_m: dg/dr_m = -2 X_il lambda_m, and lambda_m carries
	// sqrt(v_j v_j'), so each of the two patterns gets -X_il lambda_m.
	for m, pr := range p.neg {
		xil := p.x.At(pr[0], pr[1])
		p.lastG[off+m] = 2 * xil * p.lam[m]
		p.lastG[p.pat[pr[0]]] += xil * p.lam[m] / p.v[p.pat[pr[0]]]
		p.lastG[p.pat[pr[1]]] += xil * p.lam[m] / p.v[p.pat[pr[1]]]
	}
	for j, v := range p.v {
		p.lastG[j] *= v
	}
	return -gr
}

// lowerBound converts the current W into multipliers of Eq. 6 itself:
// v_j = the largest entry of W on pattern j's block and Lambda = U - W >= 0
// (W is zero off the patterns), so 2 tr(P) - sum_j v_j bounds the optimum.
func (p *kbDual) lowerBound() float64 {
	v := append([]float64(nil), p.v...)
	for k, pr := range p.pairs {
		j := p.pat[pr[0]]
		v[j] = math.Max(v[j], p.mu[k])
	}
	return 2*p.trP - floats.Sum(v)
}

// primal turns X(W) into feasible points of Eq. 6 and returns the better
// one's encoder and loss (ok = false if neither is positive definite).
// Negative entries are clipped to zero (X >= 0 can be active off the
// patterns, giving small negative entries of X(W) for short periods b), and
// each pattern's rows and columns are rescaled so the pattern sums to
// exactly 1. The two candidates differ in the within-pattern off-diagonal
// entries: zeroed (they vanish at the optimum), or kept where positive,
// which is more often positive definite far from the optimum.
func (p *kbDual) primal() (c *mat.Dense, loss float64, ok bool) {
	loss = math.Inf(1)
	for _, zero := range []bool{true, false} {
		if cc, l, good := p.primalCandidate(zero); good && l < loss {
			c, loss, ok = cc, l, true
		}
	}
	return c, loss, ok
}

func (p *kbDual) primalCandidate(zeroWithin bool) (c *mat.Dense, loss float64, ok bool) {
	n := p.n
	xs := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		row := p.x.RawRowView(i)
		if !(row[i] > 0) {
			return nil, 0, false
		}
		for j := i; j < n; j++ {
			v := row[j]
			if v < 0 || (zeroWithin && j != i && p.pat[i] == p.pat[j]) {
				v = 0
			}
			xs.SetSym(i, j, v)
		}
	}
	sum := make([]float64, p.npat)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if p.pat[i] == p.pat[j] {
				sum[p.pat[i]] += xs.At(i, j)
			}
		}
	}
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			xs.SetSym(i, j, xs.At(i, j)/math.Sqrt(sum[p.pat[i]]*sum[p.pat[j]]))
		}
	}
	c, err := lowerFactor(xs)
	if err != nil {
		return nil, 0, false
	}
	b, err := decoderFor(p.a, c)
	if err != nil {
		return nil, 0, false
	}
	fro := mat.Norm(b, 2)
	return c, fro * fro, true
}

// kbConverger tracks the best primal loss and dual bound at each major
// iteration, reports progress and stops at the target gap or on a cancelled
// context.
type kbConverger struct {
	p        *kbDual
	s        *OptimizeSettings
	target   float64
	iter     int
	lb       float64
	bestLoss float64
	best     *mat.Dense
}

func (c *kbConverger) Init(int) {}

func (c *kbConverger) done() bool { return c.iter > 0 && relGap(c.bestLoss, c.lb) <= c.target }

func (c *kbConverger) Converged(loc *optimize.Location) optimize.Status {
	if c.p.ctx.Err() != nil {
		return optimize.Failure
	}
	if c.iter == 0 {
		c.lb, c.bestLoss = math.Inf(-1), math.Inf(1)
	}
	c.iter++
	c.p.eval(loc.X, nil)
	if math.IsNaN(c.p.trP) {
		return optimize.NotTerminated
	}
	c.lb = math.Max(c.lb, c.p.lowerBound())
	loss := math.Inf(1)
	if enc, l, ok := c.p.primal(); ok {
		loss = l
		if l < c.bestLoss {
			c.bestLoss, c.best = l, enc
		}
	}
	gap := relGap(c.bestLoss, c.lb)
	if math.IsInf(c.bestLoss, 1) {
		gap = math.Inf(1)
	}
	c.s.report(OptimizeProgress{Iter: c.iter, Loss: loss, LowerBound: c.lb, Gap: gap})
	if gap <= c.target {
		return optimize.FunctionConvergence
	}
	return optimize.NotTerminated
}
