package mfnoise

import (
	"fmt"
	"math"
	"sync"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// BandedStrategy is a banded encoder bound to the workload A it decodes
// (B = A C^-1): the dpcore.Strategy of bandmf above dpcore.DenseStepLimit
// steps, whose sensitivity, loss and noise need only the band (O(n
// Bands) numbers). Its dense matrices are built on demand, as a Toeplitz
// strategy's are.
type BandedStrategy struct {
	Encoder  *BandedEncoder
	Workload dpcore.Workload

	rowsOnce sync.Once
	rows     []float64
	rowsErr  error
}

// For binds e to workload w, which must have e.N steps.
func (e *BandedEncoder) For(w dpcore.Workload) (*BandedStrategy, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	if w.N != e.N {
		return nil, guard.Invalidf("bandmf:%d: workload has %d steps, the encoder %d", e.Bands, w.N, e.N)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return &BandedStrategy{Encoder: e, Workload: w}, nil
}

// Validate checks the shape and values of the band: 1 <= Bands <= N,
// N*Bands entries, finite, a nonzero diagonal, and zeros past the last
// row.
func (e *BandedEncoder) Validate() error {
	if e == nil {
		return guard.Invalidf("banded encoder: nil")
	}
	if e.N < 1 || e.N > dpcore.StructuredStepLimit || e.Bands < 1 || e.Bands > e.N {
		return guard.Invalidf("banded encoder: %d steps and %d bands, need 1 <= bands <= steps <= %d", e.N, e.Bands, dpcore.StructuredStepLimit)
	}
	if len(e.Band) != e.N*e.Bands {
		return guard.Invalidf("banded encoder: %d band entries, want %d x %d", len(e.Band), e.N, e.Bands)
	}
	for j := 0; j < e.N; j++ {
		col := e.Band[j*e.Bands : (j+1)*e.Bands]
		if c := col[0]; c == 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return guard.Invalidf("banded encoder: C[%d,%d] = %v, want a finite nonzero diagonal", j+1, j+1, c)
		}
		for d, v := range col {
			if math.IsNaN(v) || math.IsInf(v, 0) || (j+d >= e.N && v != 0) {
				return guard.Invalidf("banded encoder: C[%d,%d] = %v", j+d+1, j+1, v)
			}
		}
	}
	return nil
}

// Steps is n.
func (s *BandedStrategy) Steps() int { return s.Encoder.N }

// Sensitivity is the encoder's sensitivity under the schema from its
// column norms (sensitivity.OfBanded), exact under single participation
// and under (k,b) and min-separation with b >= Bands. With more bands
// than b it is computed from the dense encoder, refused above
// dpcore.DenseStepLimit steps.
func (s *BandedStrategy) Sensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	e := s.Encoder
	if schema.Kind != dpcore.Single && schema.K > 1 && e.Bands > schema.B {
		if err := guard.Dense(fmt.Sprintf("sensitivity of bandmf:%d under %s (more bands than b)", e.Bands, schema), e.N, 1); err != nil {
			return dpcore.SensitivityResult{}, err
		}
		return sensitivity.Of(e.Dense(), schema)
	}
	norms := make([]float64, e.N)
	for j := range norms {
		for _, v := range e.Band[j*e.Bands : (j+1)*e.Bands] {
			norms[j] += v * v
		}
	}
	return sensitivity.OfBanded(norms, e.Bands, schema)
}

// DecoderRowNorms are ||B[i,:]||^2 for B = A C^-1: row i of B solves
// x C = A[i,:] by back substitution over the band, O(i Bands), with the
// rows of A made one at a time (O(n) memory, O(n^2 Bands) time in all).
// They are computed once.
func (s *BandedStrategy) DecoderRowNorms() ([]float64, error) {
	s.rowsOnce.Do(func() { s.rows, s.rowsErr = s.decoderRowNorms() })
	if s.rowsErr != nil {
		return nil, s.rowsErr
	}
	return append([]float64(nil), s.rows...), nil
}

func (s *BandedStrategy) decoderRowNorms() ([]float64, error) {
	e, w := s.Encoder, s.Workload
	n, nb := e.N, e.Bands
	var eta, pw []float64
	if w.Kind != dpcore.PrefixSumKind {
		var err error
		if eta, err = w.Schedule.Rates(n); err != nil {
			return nil, err
		}
		// beta^t by the same recurrence as Workload.Matrix, so the rows
		// are A's to the bit.
		pw = make([]float64, n)
		pw[0] = 1
		for t := 1; t < n; t++ {
			pw[t] = pw[t-1] * w.Momentum
		}
	}
	a := make([]float64, n) // row i of A, entries 0..i
	x := make([]float64, n)
	out := make([]float64, n)
	for i := 0; i < n; i++ {
		// A[i,j] = A[i-1,j] + eta_i beta^(i-j) (1 for a prefix sum).
		if eta == nil {
			a[i] = 1
		} else {
			for j := 0; j <= i; j++ {
				a[j] += eta[i] * pw[i-j]
			}
		}
		// x_j = (a_j - sum_{d=1}^{Bands-1} x_{j+d} C[j+d,j]) / C[j,j],
		// with x_l = 0 for l > i.
		r := 0.0
		for j := i; j >= 0; j-- {
			col := e.Band[j*nb : (j+1)*nb]
			v := a[j]
			for d := 1; d < nb && j+d <= i; d++ {
				v -= x[j+d] * col[d]
			}
			v /= col[0]
			x[j] = v
			r += v * v
		}
		out[i] = r
	}
	return out, nil
}

// Matrices are the dense encoder and decoder A C^-1, refused above
// dpcore.DenseStepLimit steps with the memory they would need.
func (s *BandedStrategy) Matrices() (encoder, decoder *mat.Dense, err error) {
	e := s.Encoder
	if err := guard.Dense(fmt.Sprintf("bandmf:%d", e.Bands), e.N, denseMatrices); err != nil {
		return nil, nil, err
	}
	a, err := s.Workload.Matrix()
	if err != nil {
		return nil, nil, err
	}
	c := e.Dense()
	b, err := decoderFor(a, c)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: bandmf:%d: %w", e.Bands, err)
	}
	return c, b, nil
}
