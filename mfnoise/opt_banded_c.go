package mfnoise

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// The banded objective over the encoder itself (McKenna 2024, "Scaling up
// the banded matrix factorization mechanism", Sec. 3): the lower-triangular
// b-banded C is the variable, its columns normalized, and the loss is
// ||A C^-1||_F^2. It is the objective of bandProblem at X = C^T C, with no
// Cholesky factorization (C is X's factor in reversed order of indices)
// and no positive definite cone to stay in, only C's diagonal away from 0.

// encoderBandProblem evaluates f(U) = ||A C^-1||_F^2 and its gradient over
// the free entries U of a b-banded lower-triangular encoder, C = U with
// each column scaled to unit norm. Free entry (j, d) is U[j+d, j] for
// d = 0..b-1, stored at j*b + d; the entries with j+d >= n are not used
// (they stay as they are and their gradient is 0).
type encoderBandProblem struct {
	a     *mat.Dense
	n, b  int
	d     *panelEval
	c     []float64 // the normalized encoder, laid out as U
	norms []float64 // the column norms of U
	last  evalCache
}

func newEncoderBandProblem(a *mat.Dense, bands int) *encoderBandProblem {
	n, _ := a.Dims()
	p := &encoderBandProblem{a: a, n: n, b: bands, c: make([]float64, n*bands), norms: make([]float64, n)}
	bp := &bandProblem{a: a, n: n, k: bands - 1}
	p.d = bp.panelEval()
	return p
}

func (p *encoderBandProblem) dim() int { return p.n * p.b }

// normalize stores C (the columns of u at unit norm) in p.c and the
// norms; false when a column is zero or its diagonal entry is.
func (p *encoderBandProblem) normalize(u []float64) bool {
	n, b := p.n, p.b
	for j := 0; j < n; j++ {
		h := min(b, n-j)
		col := u[j*b : j*b+h]
		s := floats.Norm(col, 2)
		if !(s > 0) || math.IsInf(s, 0) || col[0] == 0 {
			return false
		}
		p.norms[j] = s
		dst := p.c[j*b : j*b+b]
		for d := range dst {
			dst[d] = 0
		}
		for d, v := range col {
			dst[d] = v / s
		}
	}
	return true
}

// setFactor writes the factor L = J C^T J of X' = J X J (the panel
// evaluation's lower-triangular banded factor) from p.c and prepares the
// panels; false when C is singular.
func (p *encoderBandProblem) setFactor() bool {
	n, b := p.n, p.b
	lb := grow(&p.d.lb, n*b)
	for q := 0; q < n; q++ {
		i := n - 1 - q
		for d := 0; d < min(b, n-q); d++ {
			lb[i*b+d] = p.c[q*b+d] // L[i, i-d] = C[q+d, q]
		}
	}
	p.d.inBand, p.d.cross = true, true
	return p.d.prepare()
}

// eval returns ||A C^-1||_F^2 at u and, if g is not nil, its gradient
// there. Singular encoders have value +Inf.
func (p *encoderBandProblem) eval(u, g []float64) float64 {
	return p.last.eval(u, g, func(u, grad []float64) (float64, bool) {
		if !p.normalize(u) || !p.setFactor() {
			return 0, false
		}
		p.d.runPanels(nil, nil)
		f := 0.0
		for _, v := range p.d.gf {
			f += v
		}
		p.gradient(grad)
		return f, true
	})
}

// gradient writes the gradient over U from the panels' sums. With M =
// X^-1 A^T A X^-1 the gradient of tr(A^T A X^-1) over X is -M, so over C
// (X = C^T C) it is -2 C M = -2 Z^T Y with Z = A C^-1 and Y = A X^-1 (C M
// = C C^-1 C^-T A^T A X^-1), of which the panels sum the band (cross);
// the normalization C[:,j] = U[:,j] / s_j maps a column's gradient g to
// (g - c (c . g)) / s_j.
func (p *encoderBandProblem) gradient(g []float64) {
	n, b, d := p.n, p.b, p.d
	s := d.s
	// (Z^T Y)[j+e, j] is the panels' entry (p', q') = (n-1-j, n-1-j-e)
	// in reversed indices, stored in block q'/s at (p'-i0, q'-i0).
	for j := 0; j < n; j++ {
		h := min(b, n-j)
		gc := g[j*b : j*b+b]
		for e := 0; e < h; e++ {
			pr, qr := n-1-j, n-1-j-e
			blk := qr / s
			i0 := blk * s
			sz := min(i0+s, n) - i0
			at := d.off[blk] + (pr-i0)*sz + qr - i0
			sum := 0.0
			for gi := range d.gyy {
				sum += d.gyy[gi][at]
			}
			gc[e] = -2 * sum
		}
		clear(gc[h:])
		col := p.c[j*b : j*b+h]
		dot := floats.Dot(col, gc[:h])
		for e := range col {
			gc[e] = (gc[e] - col[e]*dot) / p.norms[j]
		}
	}
}

// warmStart is the deterministic start of the encoder optimization: the
// banded Toeplitz optimum for the same band count (toeplitzBandCoef), as
// the columns of U (normalized by eval).
func (p *encoderBandProblem) warmStart(coef []float64) []float64 {
	u := make([]float64, p.dim())
	for j := 0; j < p.n; j++ {
		for d := 0; d < min(p.b, p.n-j); d++ {
			u[j*p.b+d] = coef[d]
		}
	}
	return u
}

// gram returns the free entries of X = C^T C (bandProblem's layout: entry
// (o, i) is X[i, i-o], o = 1..b-1, o-major) for the current p.c.
func (p *encoderBandProblem) gram() []float64 {
	n, b := p.n, p.b
	x := make([]float64, 0, (b-1)*n)
	for o := 1; o < b; o++ {
		for i := o; i < n; i++ {
			// Columns i-o and i overlap on rows i..i-o+b-1.
			ci := p.c[i*b : i*b+min(b, n-i)]
			cj := p.c[(i-o)*b+o : (i-o)*b+b]
			x = append(x, floats.Dot(ci[:min(len(ci), len(cj))], cj[:min(len(ci), len(cj))]))
		}
	}
	return x
}

// bandedRounds is the most stall-rule runs of the encoder method, each
// at a tenth of the last one's threshold, until its bound certifies the
// target gap (n <= bandedBoundMaxN).
const bandedRounds = 3

// bandedBoundMaxN is the largest n at which the encoder optimization
// proves a lower bound (bandProblem.lowerBound: a dense polar
// decomposition, O(n^3), about 0.3 CPU s at n = 1024 and 5 at n = 2000);
// above it the run stops at the stall rule and states no certificate.
const bandedBoundMaxN = 1024

// optimizeBandedEncoder is optimizeBanded's method: L-BFGS over the
// encoder's band (encoderBandProblem), from the banded Toeplitz optimum
// (warmStart), stopping when the loss decreased by less than rel over 10
// iterations (see optimizeBanded); for n <= bandedBoundMaxN it then proves
// the dual bound of bandProblem.lowerBound at the result (LowerBound and
// Gap of the Result; Status Converged when the gap is at most the target,
// otherwise as the run ended) and, while the gap is above the target,
// continues at a tenth of the threshold (bandedRounds runs at most); it
// proves none above (LowerBound -Inf).
func optimizeBandedEncoder(ctx context.Context, w dpcore.Workload, a *mat.Dense, bands int, set *optimize.Settings, maxIter int) (*encoderBandProblem, *optimize.Result, error) {
	p := newEncoderBandProblem(a, bands)
	coef, err := toeplitzBandCoef(ctx, w, bands)
	if err != nil {
		return nil, nil, err
	}
	u0 := p.warmStart(coef)
	if math.IsInf(p.eval(u0, nil), 1) {
		// The Toeplitz start is singular (it never is for an optimum of
		// its family): start from the identity, DP-SGD.
		for i := range u0 {
			u0[i] = 0
		}
		for j := 0; j < p.n; j++ {
			u0[j*bands] = 1
		}
	}
	gap, rel := defaultBandedGap, optimize.DefaultGap/100
	if set != nil && set.Gap > 0 {
		gap, rel = set.Gap, set.Gap/100
	}
	if set != nil && set.Rel > 0 {
		rel = set.Rel
	}
	prob := optimize.Problem{Func: p.eval}
	bounded := p.n <= bandedBoundMaxN && bands > 1
	x, iters := u0, 0
	var res *optimize.Result
	for round := 0; ; round++ {
		run := optimize.Settings{Gap: gap, Rel: rel, Window: 10, MaxIter: maxIter - iters}
		if set != nil {
			run.Progress = set.Progress
		}
		r, err := optimize.Minimize(ctx, prob, x, &run, &optimize.LBFGS{Store: bandedMemory})
		if err != nil {
			return nil, nil, err
		}
		iters += r.Iterations
		if r.Status == optimize.IterationLimit {
			return nil, nil, fmt.Errorf("no convergence in %d iterations", maxIter)
		}
		res, x = r, r.X
		res.Iterations = iters
		p.last.reset()
		if f := p.eval(x, nil); math.IsInf(f, 1) {
			return nil, nil, fmt.Errorf("the optimized encoder is singular")
		}
		res.LowerBound, res.Gap = math.Inf(-1), 0
		if !bounded {
			break
		}
		// The dual bound at the result's multipliers (one dense polar
		// decomposition), then the panels hold the encoder's factor again.
		bp := &bandProblem{a: a, n: p.n, k: bands - 1, panels: p.d}
		lb, err := bp.lowerBound(ctx, p.gram())
		p.last.reset()
		p.eval(x, nil)
		if err == nil && lb > 0 {
			res.LowerBound, res.Gap = lb, optimize.RelGap(res.Loss, lb)
			if res.Gap <= gap {
				res.Status = optimize.Converged
				break
			}
		}
		// The bound lags until the iterate is stationary in X as well:
		// continue at a tenth of the stall threshold, at most twice (at
		// n = 1000, 20 bands: gap 1.4e-2 at 1e-6, 3.5e-5 at 1e-7).
		if round == bandedRounds-1 || ctx.Err() != nil {
			break
		}
		rel /= 10
	}
	return p, res, nil
}
