package toeplitz

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// Objective is what Optimize minimizes.
type Objective int

const (
	// TotalLoss is sens^2 ||B||_F^2, the sum of the per-step error
	// variances (SPEC 4), the objective every other optimizer uses.
	TotalLoss Objective = iota
	// MaxError is sens^2 max_i ||B[i,:]||^2, the variance of the worst
	// step, which for a Toeplitz B is the last one (Dvijotham et al. 2024
	// and McMahan et al. 2024 optimize BLTs for it).
	MaxError
)

// Problem is what Optimize solves: the encoder shape (Bands for a banded
// Toeplitz encoder, Buffers for a BLT; exactly one is set) that minimizes
// the objective for the Toeplitz workload under the participation schema.
type Problem struct {
	// Workload is A; it must be Toeplitz (the prefix sum, or momentum at
	// a constant rate; see ProxyWorkload).
	Workload dpcore.Workload
	// Schema is the participation the sensitivity is taken under.
	Schema dpcore.Schema
	// Bands is p of a banded Toeplitz encoder (toeplitz:BANDS).
	Bands int
	// Buffers is Nbuf of a BLT encoder (blt:NBUF), 1..32.
	Buffers int
	// Objective is TotalLoss (default) or MaxError.
	Objective Objective
	// Unbounded (BLT only) optimizes and reports the sensitivity of the
	// stream with no horizon: k participations b apart anywhere in an
	// infinite stream. The mechanism then keeps its guarantee however long
	// it runs; the error objective is still evaluated over N steps.
	Unbounded bool
}

// Optimize returns the encoder of the problem's shape that minimizes its
// objective (see optimizeBands and optimizeBLT for the methods), with the
// run: res.Loss is the objective reached (for TotalLoss and unit noise
// multiplier, the encoder's Loss under the schema), res.X the free
// parameters, res.Status why L-BFGS stopped (optimize.Stalled when the
// objective stopped decreasing, optimize.NoDescent when no step decreased
// it). Every iterate is a valid encoder, so a run that stopped early still
// returns its best one. Package mfnoise's Optimize is the door callers use;
// it calls this one for its Toeplitz families.
func Optimize(ctx context.Context, p Problem, set *optimize.Settings) (*Encoder, *optimize.Result, error) {
	start := time.Now()
	var t *Encoder
	var res *optimize.Result
	var err error
	switch {
	case (p.Bands > 0) == (p.Buffers > 0):
		return nil, nil, guard.Invalidf("optimize toeplitz: %d bands and %d buffers, set exactly one", p.Bands, p.Buffers)
	case p.Bands > 0:
		if p.Unbounded {
			return nil, nil, guard.Invalidf("optimize toeplitz: an unbounded stream is for BLT encoders (set Buffers)")
		}
		t, res, err = optimizeBands(ctx, p, set)
	default:
		t, res, err = optimizeBLT(ctx, p, set)
	}
	if err != nil {
		return nil, nil, err
	}
	res.Elapsed = time.Since(start)
	return t, res, nil
}

// Defaults of the Toeplitz optimizers' settings: L-BFGS stops when the
// objective decreased by less than toeplitzRel (relative) over 10
// iterations, or fails after toeplitzMaxIter iterations.
const (
	toeplitzRel     = 1e-7
	toeplitzMaxIter = 2000
)

// toeplitzWorkload is the first column a of a Toeplitz workload A and the
// weights of the objective on b = A g: sum_k weight_k b_k^2.
type toeplitzWorkload struct {
	w      dpcore.Workload
	eta    []float64
	weight []float64
}

func newToeplitzWorkload(what string, w dpcore.Workload, obj Objective) (*toeplitzWorkload, error) {
	eta, err := workloadRates(w)
	if err != nil {
		return nil, err
	}
	if eta != nil && !constantRates(eta) {
		return nil, guard.Invalidf("%s: the workload %s has a time-varying learning rate, so A is not Toeplitz; optimize for the prefix sum or a constant rate", what, w)
	}
	if err := guard.Steps(w.N); err != nil {
		return nil, err
	}
	n := w.N
	tw := &toeplitzWorkload{w: w, eta: eta, weight: make([]float64, n)}
	for k := range tw.weight {
		tw.weight[k] = 1
		if obj == TotalLoss {
			tw.weight[k] = float64(n - k)
		}
	}
	return tw, nil
}

// errorAndAdjoint returns F = sum_k weight_k b_k^2 with b = A g, and
// gamma = dF/dg = A^T (2 weight .* b).
func (tw *toeplitzWorkload) errorAndAdjoint(g, gamma []float64) float64 {
	b := gamma
	copy(b, g)
	applyWorkloadVec(tw.w, tw.eta, b)
	f := 0.0
	for k, v := range b {
		f += tw.weight[k] * v * v
		b[k] = 2 * tw.weight[k] * v
	}
	// A^T = M_beta^T diag(eta) S^T: suffix sums, rates, then the reversed
	// momentum recursion.
	n := len(b)
	for i := n - 2; i >= 0; i-- {
		b[i] += b[i+1]
	}
	if tw.w.Kind == dpcore.MomentumKind {
		for i := range b {
			b[i] *= tw.eta[i]
		}
		for i := n - 2; i >= 0; i-- {
			b[i] += tw.w.Momentum * b[i+1]
		}
	}
	return f
}

// combAdjoint returns v with v_j = sum_{q < k, j + q b < n} u_{j + q b}, the
// gradient (halved) of sum_t u_t^2 through u = comb(c) of packedSens2.
func combAdjoint(u []float64, k, b int) []float64 {
	n := len(u)
	v := make([]float64, n)
	for j := n - 1; j >= 0; j-- {
		s := u[j]
		if j+b < n {
			s += v[j+b]
		}
		if kb := k * b; kb > 0 && k < n && j+kb < n {
			s -= u[j+kb]
		}
		v[j] = s
	}
	return v
}

// packedComb returns u_t = sum_{q < k, q b <= t} c_{t - q b}, the packed
// pattern's C 1_pi, and sum_t u_t^2 = ||C 1_pi||^2.
func packedComb(c []float64, k, b int) ([]float64, float64) {
	n := len(c)
	u := make([]float64, n)
	sum := 0.0
	for t := range u {
		v := c[t]
		if t >= b {
			v += u[t-b]
		}
		if kb := k * b; kb > 0 && k < n && kb <= t {
			v -= c[t-kb]
		}
		u[t] = v
		sum += v * v
	}
	return u, sum
}

func schemaKB(schema dpcore.Schema, n int) (int, int) {
	if schema.Kind == dpcore.Single || schema.K <= 1 {
		return 1, n
	}
	return schema.K, schema.B
}

// optimizeBands returns the banded Toeplitz encoder with p = pr.Bands bands
// (c_0 = 1, c_1..c_{p-1} free) that minimizes the objective for the
// Toeplitz workload under the schema, by L-BFGS from the banded square root
// (Kalinin and Lampert 2024) — the parameterization of McKenna 2024's
// banded Toeplitz mechanisms. The loss and its exact gradient cost O(n p)
// per evaluation: g = C^-1 e_1 by banded forward substitution, b = A g,
// lambda = C^-T dF/dg by banded back substitution and dF/dc_j = -sum_t
// lambda_{t+j} g_t; no n x n matrix is formed. The sensitivity in the
// objective is the one Encoder.Sensitivity reports for the iterate: exact
// for non-negative (and, under min-sep, non-increasing) coefficients, the
// proven |c| or envelope bound otherwise (see toeplitzEval).
func optimizeBands(ctx context.Context, pr Problem, set *optimize.Settings) (*Encoder, *optimize.Result, error) {
	w, schema, p := pr.Workload, pr.Schema, pr.Bands
	tw, err := newToeplitzWorkload("optimize toeplitz", w, pr.Objective)
	if err != nil {
		return nil, nil, err
	}
	n := w.N
	if err := schema.Validate(n); err != nil {
		return nil, nil, err
	}
	if p < 1 || p > n {
		return nil, nil, guard.Invalidf("optimize toeplitz: %d bands, need 1..n = %d", p, n)
	}
	if float64(n)*float64(p) > maxToeplitzWork {
		return nil, nil, guard.Invalidf("optimize toeplitz: %d bands over n = %d steps cost n p = %.3g operations per evaluation, over the limit %.3g; use fewer bands or blt:NBUF", p, n, float64(n)*float64(p), float64(maxToeplitzWork))
	}
	k, b := schemaKB(schema, n)
	sq, _ := Sqrt(p)
	x0 := append([]float64(nil), sq.Coef[1:]...)
	// The smooth objective (|c| in the packed formula) first; under
	// min-sep, if its optimum is not non-increasing (so the envelope bound
	// applies), continue on the envelope objective that is then reported.
	eval := toeplitzEval(tw, p, k, b, false)
	res, err := minimizeLBFGS(ctx, "optimize toeplitz", x0, eval, set)
	if err != nil {
		return nil, nil, err
	}
	if schema.Kind == dpcore.MinSep && k > 1 {
		env := toeplitzEval(tw, p, k, b, true)
		if env(res.X, nil) > eval(res.X, nil)*(1+1e-12) {
			res2, err := minimizeLBFGS(ctx, "optimize toeplitz", res.X, env, set)
			if err != nil {
				return nil, nil, err
			}
			res2.Iterations += res.Iterations
			res = res2
		}
		eval = env
	}
	coef := append([]float64{1}, res.X...)
	t, err := New("toeplitz:"+strconv.Itoa(p), n, coef)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: optimize toeplitz: %w", err)
	}
	res.Loss = eval(res.X, nil)
	return t, res, nil
}

// maxToeplitzWork bounds n p, the cost of one evaluation of the banded
// Toeplitz objective (a few hundred are needed): about a second each.
const maxToeplitzWork = 1 << 31

// unboundedHorizon is the head length (k-1) b + 1 of the unbounded-stream
// sensitivity, refused above dpcore.StructuredStepLimit.
func unboundedHorizon(k, b int) (int, error) {
	if k <= 1 {
		return 1, nil
	}
	if float64(k-1)*float64(b)+1 > dpcore.StructuredStepLimit {
		return 0, guard.Invalidf("unbounded-stream sensitivity: (k-1) b + 1 = %.3g steps before the geometric tail, over the limit %d", float64(k-1)*float64(b)+1, dpcore.StructuredStepLimit)
	}
	return (k-1)*b + 1, nil
}

// minimizeLBFGS runs L-BFGS (optimize.Minimize) on eval from x0 and
// returns the run (best point, its iterations and why it stopped), by
// default stopping on a relative decrease below toeplitzRel over 10
// iterations.
func minimizeLBFGS(ctx context.Context, what string, x0 []float64, eval func(x, grad []float64) float64, set *optimize.Settings) (*optimize.Result, error) {
	run := optimize.Settings{Rel: toeplitzRel, MaxIter: toeplitzMaxIter}
	if set != nil {
		run = *set
		if run.Rel == 0 && run.Gap == 0 {
			run.Rel = toeplitzRel
		}
		if run.MaxIter == 0 {
			run.MaxIter = toeplitzMaxIter
		}
	}
	res, err := optimize.Minimize(ctx, optimize.Problem{Func: eval}, x0, &run, &optimize.LBFGS{Store: 20})
	if err != nil {
		return nil, fmt.Errorf("mfnoise: %s: %w", what, err)
	}
	if !guard.Finite(res.Loss) {
		return nil, fmt.Errorf("mfnoise: %s: no finite solution", what)
	}
	// Every point is a valid mechanism, only its quality differs: a run
	// that stopped at the iteration cap or found no descent still returns
	// its best point.
	return res, nil
}

// bltParamsOf maps the unconstrained optimizer variables to a BLT:
// Theta_i = logistic(x_i) in (0,1), Omega = the first Nbuf entries of
// softmax(x_Nbuf.., 0), so Omega_i > 0 and sum_i Omega_i = c_1 < 1 = c_0.
// Every such BLT has positive, strictly decreasing coefficients: its
// sensitivity is exact under every schema (McMahan et al. 2024).
//
// Signed scales would fit a band cut-off better under (k,b) participation,
// but the optima found that way cancel coefficients of 1e3 to 1e6 between
// nearly equal decays, which float32 noise buffers cannot stream; positive
// scales keep every buffer well conditioned.
func bltParamsOf(x []float64, p *BLTParams) {
	nb := len(x) / 2
	mx := 0.0
	for i := range nb {
		mx = math.Max(mx, x[nb+i])
	}
	den := math.Exp(-mx)
	for i := range nb {
		p.Theta[i] = 1 / (1 + math.Exp(-x[i]))
		p.Omega[i] = math.Exp(x[nb+i] - mx)
		den += p.Omega[i]
	}
	for i := range nb {
		p.Omega[i] /= den
	}
}

// optimizeBLT returns the BLT encoder with nbuf = pr.Buffers buffers that
// minimizes the objective for the Toeplitz workload over its n steps under
// the schema (with pr.Unbounded, for the sensitivity of an infinite
// stream). The loss
// and its exact gradient cost O(n Nbuf) per evaluation through the buffer
// recursions (the adjoint lambda = C^-T dF/dg runs the recursion backwards),
// so n = 10^6 takes seconds. Starting point: decays spread geometrically
// in (1 - 1/n, 1/2) and equal scales summing to 1/2, the square root's c_1
// (Dvijotham et al. 2024 fit BLTs to the square root).
func optimizeBLT(ctx context.Context, pr Problem, set *optimize.Settings) (*Encoder, *optimize.Result, error) {
	w, schema, nbuf := pr.Workload, pr.Schema, pr.Buffers
	tw, err := newToeplitzWorkload("optimize blt", w, pr.Objective)
	if err != nil {
		return nil, nil, err
	}
	n := w.N
	if err := schema.Validate(n); err != nil {
		return nil, nil, err
	}
	if nbuf < 1 || nbuf > 32 {
		return nil, nil, guard.Invalidf("optimize blt: %d buffers, need 1..32", nbuf)
	}
	k, b := schemaKB(schema, n)
	if pr.Unbounded && schema.Kind == dpcore.KB {
		return nil, nil, guard.Invalidf("optimize blt: an unbounded stream has no (k,b)-participation (k b covers only k b steps); use min-sep")
	}
	if pr.Unbounded {
		if _, err := unboundedHorizon(k, b); err != nil {
			return nil, nil, err
		}
	}
	x0 := make([]float64, 2*nbuf)
	for i := range nbuf {
		// 1 - Theta from 1/(2n) to 1/2, geometrically.
		r := 0.5
		if nbuf > 1 {
			r = 0.5 * math.Pow(1/float64(n), float64(i)/float64(nbuf-1))
		}
		th := 1 - r
		x0[i] = math.Log(th / (1 - th))
		x0[nbuf+i] = 0
	}
	eval := bltEval(tw, nbuf, k, b, pr.Unbounded)
	res, err := minimizeLBFGS(ctx, "optimize blt", x0, eval, set)
	if err != nil {
		return nil, nil, err
	}
	p := &BLTParams{Theta: make([]float64, nbuf), Omega: make([]float64, nbuf)}
	bltParamsOf(res.X, p)
	res.Loss = eval(res.X, nil)
	t, err := NewBLT("blt:"+strconv.Itoa(nbuf), n, *p)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: optimize blt: %w", err)
	}
	return t, res, nil
}

// toeplitzEval is the objective of optimizeBands over x = c_1..c_{p-1}
// (c_0 = 1), with its gradient when grad is not nil.
//
// The sensitivity term is the one Encoder.Sensitivity reports, so the
// optimizer never minimizes a formula that does not hold for its iterate:
// the packed pattern for |c| (single and (k,b)), and under min-sep for the
// envelope e_t = max_{s >= t} |c_s|; both equal the exact value when c is
// non-negative (and non-increasing), and the gradient flows through |.| and
// the envelope's arg max.
func toeplitzEval(tw *toeplitzWorkload, p, k, b int, minsep bool) func(x, grad []float64) float64 {
	n := len(tw.weight)
	c := make([]float64, p)
	src := make([]int, p) // the coefficient index e_t comes from
	sgn := make([]float64, p)
	g := make([]float64, n)
	gamma := make([]float64, n)
	lambda := make([]float64, n)
	full := make([]float64, n)
	return func(x, grad []float64) float64 {
		c[0] = 1
		copy(c[1:], x)
		// g = C^-1 e_1.
		for t := range g {
			v := 0.0
			if t == 0 {
				v = 1
			}
			for l := 1; l <= min(t, p-1); l++ {
				v -= c[l] * g[t-l]
			}
			g[t] = v
		}
		f := tw.errorAndAdjoint(g, gamma)
		clear(full)
		for t, v := range c {
			full[t], src[t], sgn[t] = math.Abs(v), t, 1
			if v < 0 {
				sgn[t] = -1
			}
		}
		if minsep && k > 1 {
			for t := p - 2; t >= 0; t-- {
				if full[t+1] > full[t] {
					full[t], src[t] = full[t+1], src[t+1]
				}
			}
		}
		u, s2 := packedComb(full, k, b)
		if grad == nil {
			return s2 * f
		}
		// lambda = C^-T gamma: lambda_t = gamma_t - sum_l c_l lambda_{t+l}.
		for t := n - 1; t >= 0; t-- {
			v := gamma[t]
			for l := 1; l <= min(n-1-t, p-1); l++ {
				v -= c[l] * lambda[t+l]
			}
			lambda[t] = v
		}
		v := combAdjoint(u, k, b)
		for j := 1; j < p; j++ {
			df := 0.0
			for t := 0; t+j < n; t++ {
				df -= lambda[t+j] * g[t]
			}
			grad[j-1] = s2 * df
		}
		for t := range p {
			if j := src[t]; j > 0 {
				grad[j-1] += 2 * v[t] * sgn[j] * f
			}
		}
		return s2 * f
	}
}

// bltEval is the objective of optimizeBLT over the unconstrained x of
// bltParamsOf, with its gradient when grad is not nil.
func bltEval(tw *toeplitzWorkload, nbuf, k, b int, unbounded bool) func(x, grad []float64) float64 {
	n := len(tw.weight)
	p := &BLTParams{Theta: make([]float64, nbuf), Omega: make([]float64, nbuf)}
	g := make([]float64, n)
	gamma := make([]float64, n)
	lambda := make([]float64, n)
	c := make([]float64, n)
	sig := make([]float64, nbuf)
	rho := make([]float64, nbuf)
	dTh := make([]float64, nbuf)
	dOm := make([]float64, nbuf)
	return func(x, grad []float64) float64 {
		bltParamsOf(x, p)
		clear(g)
		g[0] = 1
		p.solve(g)
		f := tw.errorAndAdjoint(g, gamma)
		var s2 float64
		var u []float64
		if unbounded {
			s2 = bltUnboundedSens2(p, k, b)
		} else {
			copy(c, p.column(n))
			u, s2 = packedComb(c, k, b)
		}
		if grad == nil {
			return s2 * f
		}
		// lambda = C^-T gamma backwards: r_{i,t} = sum_{s>t}
		// Theta^(s-t-1) lambda_s.
		clear(sig)
		for t := n - 1; t >= 0; t-- {
			v := gamma[t]
			for i := range sig {
				v -= p.Omega[i] * sig[i]
			}
			lambda[t] = v
			for i, th := range p.Theta {
				sig[i] = th*sig[i] + v
			}
		}
		// dF/dOmega_i = -sum_t lambda_t sigma_{i,t}, dF/dTheta_i = -Omega_i
		// sum_t lambda_t rho_{i,t}: sigma_{i,t} = sum_{s<t}
		// Theta^(t-1-s) g_s, rho its derivative in Theta.
		clear(sig)
		clear(rho)
		clear(dTh)
		clear(dOm)
		for t := range n {
			if t > 0 {
				for i, th := range p.Theta {
					rho[i] = th*rho[i] + sig[i]
					sig[i] = th*sig[i] + g[t-1]
				}
			}
			for i := range sig {
				dOm[i] -= lambda[t] * sig[i]
				dTh[i] -= lambda[t] * rho[i]
			}
		}
		for i := range dTh {
			dTh[i] *= p.Omega[i] * s2
			dOm[i] *= s2
		}
		// Sensitivity: d s2 / dc_j = 2 v_j, c_j = sum_i Omega_i Theta^(j-1).
		if unbounded {
			// The unbounded sensitivity has no per-coefficient form; a
			// central difference on the 2 Nbuf parameters costs 4 Nbuf
			// evaluations of O(k b Nbuf).
			q := &BLTParams{Theta: make([]float64, nbuf), Omega: make([]float64, nbuf)}
			xx := append([]float64(nil), x...)
			for j := range x {
				h := 1e-6 * math.Max(1, math.Abs(x[j]))
				xx[j] = x[j] + h
				bltParamsOf(xx, q)
				fp := bltUnboundedSens2(q, k, b)
				xx[j] = x[j] - h
				bltParamsOf(xx, q)
				fm := bltUnboundedSens2(q, k, b)
				xx[j] = x[j]
				grad[j] = (fp - fm) / (2 * h) * f
			}
		} else {
			v := combAdjoint(u, k, b)
			for i, th := range p.Theta {
				pw, dpw := 1.0, 0.0 // Theta^(j-1), (j-1) Theta^(j-2)
				so, st := 0.0, 0.0
				for j := 1; j < n; j++ {
					so += v[j] * pw
					st += v[j] * dpw
					dpw = th*dpw + pw
					pw *= th
				}
				dOm[i] += 2 * so * f
				dTh[i] += 2 * p.Omega[i] * st * f
			}
			clear(grad)
		}
		// Chain rule to x: Theta = logistic, Omega = softmax with slack.
		for i, th := range p.Theta {
			grad[i] += dTh[i] * th * (1 - th)
		}
		dot := 0.0
		for i := range p.Omega {
			dot += dOm[i] * p.Omega[i]
		}
		for i, om := range p.Omega {
			grad[nbuf+i] += om * (dOm[i] - dot)
		}
		return s2 * f
	}
}
