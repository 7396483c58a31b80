package mfnoise

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// Problem is what Optimize solves: the encoder of a family with the least
// loss for a workload under a participation schema.
type Problem struct {
	// Workload is A.
	Workload dpcore.Workload
	// Schema is the participation the encoder is optimized for; the zero
	// value means single participation. SingleFamily needs single
	// participation and KBFamily (k,b)-participation; BandedFamily does
	// not read it (its encoder has sensitivity sqrt(k) under any (k,b) or
	// min-sep schema with b >= bands).
	Schema dpcore.Schema
	// Family is the encoder family searched: SingleFamily, KBFamily,
	// BandedFamily, ToeplitzFamily or BLTFamily.
	Family Family
}

// Family is an encoder family Optimize searches. Its values are the
// types of this package named *Family.
type Family interface {
	optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error)
}

// Result is what Optimize returns: the encoder (a dense factorization or a
// Toeplitz encoder, by family), its loss, the lower bound and relative gap
// when the method proves one (0 otherwise), the iterations used, why the
// optimizer stopped (optimize.Converged when the gap was reached,
// optimize.Stalled when the loss stopped decreasing for a method without
// a bound) and the wall time.
type Result struct {
	// Factorization is the dense factorization of SingleFamily, KBFamily
	// and BandedFamily, its encoder normalized to sensitivity 1 under the
	// schema it was optimized for (nil for the Toeplitz families).
	Factorization *Factorization
	// Toeplitz is the encoder of ToeplitzFamily and BLTFamily (nil for the
	// dense families).
	Toeplitz *toeplitz.Encoder
	// Banded is BandedFamily's encoder by its band, O(n Bands) numbers
	// (nil for the other families). Above dpcore.DenseStepLimit steps it
	// is the only result (Factorization is nil).
	Banded *BandedEncoder
	// Loss is the objective reached: sens^2 ||B||_F^2 for unit noise
	// multiplier under the schema (for a Toeplitz family with the
	// MaxError objective, the worst step's error variance).
	Loss, LowerBound, Gap float64
	Iterations            int
	Status                optimize.Status
	Elapsed               time.Duration
}

// Optimize finds the encoder of p.Family with the least loss for
// p.Workload under p.Schema, tuned by set (nil: the family's defaults).
// It is the one door to every optimizer of this package; the families
// document their methods and stopping rules.
func Optimize(ctx context.Context, p Problem, set *optimize.Settings) (*Result, error) {
	if p.Family == nil {
		return nil, guard.Invalidf("optimize: no family")
	}
	if err := set.Validate(); err != nil {
		return nil, err
	}
	schema := p.Schema
	if schema.Kind == "" {
		schema = dpcore.SingleParticipation()
	}
	return p.Family.optimize(ctx, p.Workload, schema, set)
}

// ToeplitzFamily is the banded Toeplitz encoder with Bands bands
// (toeplitz:BANDS; McKenna 2024), optimized in O(n Bands) memory by
// toeplitz.Optimize for Objective (default toeplitz.TotalLoss).
type ToeplitzFamily struct {
	Bands     int
	Objective toeplitz.Objective
}

func (f ToeplitzFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeToeplitz(ctx, toeplitz.Problem{Workload: w, Schema: schema, Bands: f.Bands, Objective: f.Objective}, set)
}

// BLTFamily is the buffered linear Toeplitz encoder with Buffers buffers
// (blt:NBUF; McMahan et al. 2024), optimized in O(n Buffers) time per
// evaluation by toeplitz.Optimize for Objective; with Unbounded, for the
// sensitivity of a stream with no horizon (see toeplitz.Problem).
type BLTFamily struct {
	Buffers   int
	Objective toeplitz.Objective
	Unbounded bool
}

func (f BLTFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeToeplitz(ctx, toeplitz.Problem{Workload: w, Schema: schema, Buffers: f.Buffers, Objective: f.Objective, Unbounded: f.Unbounded}, set)
}

// optimizeToeplitz is toeplitz.Optimize as a Result.
func optimizeToeplitz(ctx context.Context, p toeplitz.Problem, set *optimize.Settings) (*Result, error) {
	t, res, err := toeplitz.Optimize(ctx, p, set)
	if err != nil {
		return nil, err
	}
	return &Result{Toeplitz: t, Loss: res.Loss, Iterations: res.Iterations, Status: res.Status, Elapsed: res.Elapsed}, nil
}

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
// measured as peak heap / (8 n^2): optimizeSingle 17.3 at n = 2048
// (552 MiB), optimizeKB 42 at n = 2000 (1293 MiB), optimizeBanded's Gram
// method (its preconditioner and lower bound) about 10; its encoder method
// holds bandedEncoderMatrices.
const (
	singleMatrices = 18
	kbMatrices     = 44
	bandedMatrices = 11
)
