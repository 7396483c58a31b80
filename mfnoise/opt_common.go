package mfnoise

import (
	"github.com/dpmf-go/dpmf/dpcore"

	"context"
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// optimizerWorkload returns the workload matrix, with errors prefixed
// "mfnoise: optimize <what>".
func optimizerWorkload(what string, w dpcore.Workload) (*mat.Dense, error) {
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

// Dense work matrices (n x n float64) each optimizer holds at its peak,
// measured as peak heap / (8 n^2): OptimizeSingle 17.3 at n = 2048
// (552 MiB), OptimizeKB 42 at n = 2000 (1293 MiB), OptimizeBanded's
// preconditioner and lower bound about 10.
const (
	singleMatrices = 18
	kbMatrices     = 44
	bandedMatrices = 11
)
