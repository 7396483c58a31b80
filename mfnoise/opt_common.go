package mfnoise

import (
	"context"
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// OptimizeSettings tunes the factorization optimizers. The zero value (and a
// nil pointer) means defaults.
type OptimizeSettings struct {
	// Gap is the relative optimality gap (Loss - LowerBound) / Loss at which
	// an optimizer stops; 0 means 1e-4. Methods without a lower bound
	// (OptimizeBanded) use it as a relative decrease tolerance instead.
	Gap float64
	// MaxIter bounds the iterations; 0 means the method's default.
	MaxIter int
	// Progress, if not nil, is called after each iteration.
	Progress func(OptimizeProgress)
}

// OptimizeProgress reports one iteration of an optimizer.
type OptimizeProgress struct {
	Iter int
	// Loss is the loss sens^2 ||B||_F^2 of the current iterate (sens
	// normalized to 1; +Inf while no feasible point is known); LowerBound
	// the best proven lower bound on the optimum; Gap = (best Loss so far -
	// LowerBound) / best Loss. Methods without a bound (OptimizeBanded)
	// report LowerBound = Gap = 0.
	Loss, LowerBound, Gap float64
	// MaxIter is the iteration bound; most runs stop earlier, at the gap
	// or when the loss stalls.
	MaxIter int
}

// OptimizeResult is what an optimizer returns: the factorization (encoder
// normalized to sensitivity 1 under the schema it was optimized for), its
// loss, the lower bound and relative gap when the method proves one, the
// iterations used and the wall time.
type OptimizeResult struct {
	Factorization         *Factorization
	Loss, LowerBound, Gap float64
	Iterations            int
	Elapsed               time.Duration
}

const defaultGap = 1e-4

func (s *OptimizeSettings) gap() float64 {
	if s == nil || s.Gap == 0 {
		return defaultGap
	}
	return s.Gap
}

func (s *OptimizeSettings) maxIter(def int) int {
	if s == nil || s.MaxIter <= 0 {
		return def
	}
	return s.MaxIter
}

func (s *OptimizeSettings) report(p OptimizeProgress) {
	if s != nil && s.Progress != nil {
		s.Progress(p)
	}
}

func (s *OptimizeSettings) validate() error {
	if s == nil {
		return nil
	}
	if math.IsNaN(s.Gap) || s.Gap < 0 {
		return invalidf("optimize: gap %v must be >= 0", s.Gap)
	}
	if s.MaxIter < 0 {
		return invalidf("optimize: max iterations %d must be >= 0", s.MaxIter)
	}
	return nil
}

// optimizerWorkload validates the settings and returns the workload
// matrix, with errors prefixed "mfnoise: optimize <what>".
func optimizerWorkload(what string, w Workload, s *OptimizeSettings) (*mat.Dense, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, fmt.Errorf("mfnoise: optimize %s: %w", what, err)
	}
	return a, nil
}

// normalizedDecoder scales the encoder c in place to sensitivity 1 (its
// sensitivity is sens) and returns the decoder B = A C^-1 and the loss
// ||B||_F^2.
func normalizedDecoder(a, c *mat.Dense, sens float64) (b *mat.Dense, loss float64, err error) {
	c.Scale(1/sens, c)
	b, err = decoderFor(a, c)
	if err != nil {
		return nil, 0, err
	}
	fro := mat.Norm(b, 2)
	return b, fro * fro, nil
}

// gramOf returns G = A^T A.
func gramOf(a *mat.Dense) *mat.SymDense {
	n, _ := a.Dims()
	g := mat.NewSymDense(n, nil)
	g.SymOuterK(1, a.T())
	return g
}

// lowerFactor returns the lower-triangular C with C^T C = X (SPEC 5.5,
// banded-MF Prop. 4.1): with J the exchange matrix, J X J = U^T U (upper
// Cholesky factor U) and C = J U J. A b-banded X gives a b-banded C.
func lowerFactor(x mat.Symmetric) (*mat.Dense, error) {
	n := x.SymmetricDim()
	jxj := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			jxj.SetSym(n-1-i, n-1-j, x.At(i, j))
		}
	}
	// lapack64.Potrf rather than mat.Cholesky: the factor is all that is
	// needed, and mat's condition estimate cost 4% of a fixed-point run.
	raw := jxj.RawSymmetric()
	if _, ok := lapack64.Potrf(raw); !ok {
		return nil, fmt.Errorf("mfnoise: encoder: C^T C is not positive definite")
	}
	c := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		row := raw.Data[i*raw.Stride:]
		for j := i; j < n; j++ {
			c.Set(n-1-i, n-1-j, row[j])
		}
	}
	return c, nil
}

// decoderFor returns B = A C^-1 for lower-triangular invertible C by a
// triangular solve (B C = A).
func decoderFor(a, c *mat.Dense) (*mat.Dense, error) {
	n, _ := c.Dims()
	for i := 0; i < n; i++ {
		if d := c.At(i, i); !(math.Abs(d) > 0) {
			return nil, fmt.Errorf("mfnoise: decoder: encoder is singular at step %d", i+1)
		}
	}
	b := mat.DenseCopyOf(a)
	cr, br := c.RawMatrix(), b.RawMatrix()
	blas64.Trsm(blas.Right, blas.NoTrans, 1,
		blas64.Triangular{Uplo: blas.Lower, Diag: blas.NonUnit, N: n, Stride: cr.Stride, Data: cr.Data}, br)
	return b, nil
}

// maxColNorm is the single-participation sensitivity of C.
func maxColNorm(c *mat.Dense) float64 {
	m, n := c.Dims()
	norms := make([]float64, n)
	for i := 0; i < m; i++ {
		row := c.RawRowView(i)
		for j, v := range row {
			norms[j] += v * v
		}
	}
	best := 0.0
	for _, v := range norms {
		best = math.Max(best, v)
	}
	return math.Sqrt(best)
}

func checkCtx(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mfnoise: %s: %w", what, err)
	}
	return nil
}

func relGap(loss, lb float64) float64 {
	if loss <= 0 {
		return 0
	}
	return math.Max(0, (loss-lb)/loss)
}
