package mfnoise

import (
	"fmt"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"gonum.org/v1/gonum/mat"
)

// Metadata describes how a factorization was made, so a stored one can be
// matched to the problem that asked for it (SPEC 5, last paragraph).
type Metadata struct {
	// Kind is the mechanism family: "dpsgd", "tree", "fft", "mf-single",
	// "mf-kb", "bandmf", or a stamped variant.
	Kind string `msgpack:"kind" json:"kind"`
	// Schema is the participation the encoder was optimized for (zero value
	// if none).
	Schema dpcore.Schema `msgpack:"schema" json:"schema"`
	// Bands is the band count of a banded encoder (0 if not banded).
	Bands int `msgpack:"bands" json:"bands,omitempty"`
	// Stamps is the number of stamped copies (0 or 1 means not stamped).
	Stamps int `msgpack:"stamps" json:"stamps,omitempty"`
	// Decoder names the decoder: "optimal", "online", "algorithm1", ...
	Decoder string `msgpack:"decoder" json:"decoder,omitempty"`
	// Loss and Gap are what an optimizer achieved (Gap: relative
	// optimality gap, 0 if unknown or closed form).
	Loss      float64   `msgpack:"loss" json:"loss,omitempty"`
	Gap       float64   `msgpack:"gap" json:"gap,omitempty"`
	LowerBnd  float64   `msgpack:"lower_bound" json:"lower_bound,omitempty"`
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
}

// Factorization is A = B C: encoder C (m x n, m >= n), decoder B (n x m) and
// the workload A they factor. Build it with NewFactorization, which checks
// the product.
type Factorization struct {
	Workload dpcore.Workload
	Encoder  *mat.Dense // C
	Decoder  *mat.Dense // B
	Meta     Metadata

	// toeplitz is the structured encoder a Toeplitz factorization came
	// from (see Toeplitz).
	toeplitz *toeplitz.Encoder
	// gram is C^T C in closed form when the family's structure gives it
	// (trees, FFT, DP-SGD and stamps of them), for Compare's sensitivity;
	// nil otherwise. It is not stored.
	gram *mat.SymDense
}

// Toeplitz returns the Toeplitz encoder a factorization made by Dense from
// a *toeplitz.Strategy came from, or nil. Package noise streams such a
// factorization with the mechanism's own buffers (Nbuf d-vectors for a BLT)
// instead of from the dense encoder. It is not stored by
// SaveFactorization: Toeplitz mechanisms are rebuilt, never loaded.
func (f *Factorization) Toeplitz() *toeplitz.Encoder { return f.toeplitz }

// FactorizationTolerance is the relative Frobenius tolerance of
// ||A - BC||_F <= tol ||A||_F that NewFactorization enforces.
const FactorizationTolerance = 1e-9

// NewFactorization checks shapes, finiteness and ||A - BC||_F <= 1e-9 ||A||_F
// and returns the factorization. It refuses anything else: a wrong
// factorization would release a different workload than the optimizer uses.
func NewFactorization(w dpcore.Workload, c, b *mat.Dense, meta Metadata) (*Factorization, error) {
	a, err := w.Matrix()
	if err != nil {
		return nil, err
	}
	n := w.N
	m, nc := c.Dims()
	if nc != n || m < n {
		return nil, guard.Invalidf("factorization: encoder is %d x %d, want m x %d with m >= %d", m, nc, n, n)
	}
	if br, bc := b.Dims(); br != n || bc != m {
		return nil, guard.Invalidf("factorization: decoder is %d x %d, want %d x %d", br, bc, n, m)
	}
	if err := guard.FiniteMatrix("encoder", c); err != nil {
		return nil, err
	}
	if err := guard.FiniteMatrix("decoder", b); err != nil {
		return nil, err
	}
	// mulFactors exploits the structure of tree, banded, stamped and FFT
	// encoders: a dense product costs O(n m n) and dominated building those
	// mechanisms at n = 2000.
	bc := linalg.MulFactors(b, c)
	bc.Sub(a, bc)
	res, norm := mat.Norm(bc, 2), mat.Norm(a, 2)
	if !(res <= FactorizationTolerance*norm) {
		return nil, fmt.Errorf("mfnoise: factorization: ||A - BC||_F = %.3g exceeds %.0e ||A||_F = %.3g", res, FactorizationTolerance, FactorizationTolerance*norm)
	}
	if meta.CreatedAt.IsZero() {
		meta.CreatedAt = time.Now().UTC()
	}
	return &Factorization{Workload: w, Encoder: c, Decoder: b, Meta: meta}, nil
}

// N is the number of steps.
func (f *Factorization) N() int { return f.Workload.N }

// Sensitivity is sensitivity.Of(f.Encoder, s).
func (f *Factorization) Sensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	return sensitivity.Of(f.Encoder, schema)
}

// Loss is sens^2(C) ||B||_F^2 under the schema: the total squared error of the
// released workload for unit noise multiplier (SPEC 4).
func (f *Factorization) Loss(schema dpcore.Schema) (float64, error) {
	sens, err := f.Sensitivity(schema)
	if err != nil {
		return 0, err
	}
	return f.LossAt(sens.Value), nil
}

// LossAt is sens^2 ||B||_F^2 for a sensitivity computed elsewhere (the
// per-participation sensitivity of amplified accounting, for one).
func (f *Factorization) LossAt(sens float64) float64 {
	loss, _ := errorProfile(sens, rowNorms2(f.Decoder))
	return loss
}

// errorProfile is the loss of SPEC 4, the one formula every mechanism's
// loss comes from: given the squared decoder row norms r_i = ||B[i,:]||^2
// (however a mechanism computes them), step i's error variance is
// sens^2 r_i for unit noise multiplier and the loss is their sum,
// sens^2 ||B||_F^2.
func errorProfile(sens float64, r []float64) (loss float64, stepVar []float64) {
	stepVar = make([]float64, len(r))
	for i, v := range r {
		stepVar[i] = sens * sens * v
		loss += stepVar[i]
	}
	return loss, stepVar
}

// rowNorms2 returns ||B[i,:]||^2 for every row of b.
func rowNorms2(b *mat.Dense) []float64 {
	n, _ := b.Dims()
	r := make([]float64, n)
	for i := range r {
		for _, x := range b.RawRowView(i) {
			r[i] += x * x
		}
	}
	return r
}

// RMSE is sqrt(Loss/n), the root-mean-square error per step for unit noise
// multiplier.
func (f *Factorization) RMSE(schema dpcore.Schema) (float64, error) {
	l, err := f.Loss(schema)
	if err != nil {
		return 0, err
	}
	return math.Sqrt(l / float64(f.N())), nil
}

// StepVariance returns sens^2 ||B[i,:]||^2 for each step: the variance of the
// error on step i's output for unit noise multiplier.
func (f *Factorization) StepVariance(schema dpcore.Schema) ([]float64, error) {
	sens, err := f.Sensitivity(schema)
	if err != nil {
		return nil, err
	}
	_, v := errorProfile(sens.Value, rowNorms2(f.Decoder))
	return v, nil
}

// OptimalDecoder returns B = A C^+ = A (C^T C)^-1 C^T, the minimum-Frobenius
// decoder for the encoder C (SPEC 4). C must have full column rank.
func OptimalDecoder(a, c mat.Matrix) (*mat.Dense, error) {
	m, n := c.Dims()
	if ar, ac := a.Dims(); ar != n || ac != n {
		return nil, guard.Invalidf("optimal decoder: workload is %d x %d, encoder %d x %d", ar, ac, m, n)
	}
	if m < n {
		return nil, guard.Invalidf("optimal decoder: encoder is %d x %d, needs m >= n", m, n)
	}
	var x mat.SymDense
	x.SymOuterK(1, c.T())
	var ch mat.Cholesky
	if !ch.Factorize(&x) {
		return nil, guard.Invalidf("optimal decoder: encoder does not have full column rank")
	}
	if cond := ch.Cond(); cond > 1e14 || math.IsNaN(cond) {
		return nil, guard.Invalidf("optimal decoder: encoder is numerically rank deficient (cond(C^T C) = %.3g)", cond)
	}
	var y mat.Dense // X^-1 A^T
	if err := ch.SolveTo(&y, a.T()); err != nil {
		return nil, fmt.Errorf("mfnoise: optimal decoder: %w", err)
	}
	var bt mat.Dense
	bt.Mul(c, &y) // (A C^+)^T = C X^-1 A^T
	b := mat.DenseCopyOf(bt.T())
	return b, nil
}
