package mfnoise

import (
	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/gonum/mat"
)

// The two representations of a built mechanism are dpcore.Strategy values:
// the dense *Factorization, and the O(n) *ToeplitzStrategy (a Toeplitz
// encoder with the workload it decodes). Package noise streams either.

// Steps is n: a Factorization is a dpcore.Strategy.
func (f *Factorization) Steps() int { return f.N() }

// DecoderRowNorms are ||B[i,:]||^2 for every step i.
func (f *Factorization) DecoderRowNorms() ([]float64, error) { return rowNorms2(f.Decoder), nil }

// Matrices are the encoder C and decoder B.
func (f *Factorization) Matrices() (encoder, decoder *mat.Dense, err error) {
	return f.Encoder, f.Decoder, nil
}

// Dense is f itself.
func (f *Factorization) Dense() (*Factorization, error) { return f, nil }

// ToeplitzStrategy is a Toeplitz encoder bound to the workload A it
// decodes (B = A C^-1): the strategy of the Toeplitz mechanisms, whose
// sensitivity, loss and noise need no n x n matrix.
type ToeplitzStrategy struct {
	Toeplitz *Toeplitz
	Workload dpcore.Workload
}

// For binds t to workload w, which must have t.N steps.
func (t *Toeplitz) For(w dpcore.Workload) (*ToeplitzStrategy, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if w.N != t.N {
		return nil, invalidf("toeplitz %s: workload has %d steps, the mechanism %d", t.Name, w.N, t.N)
	}
	return &ToeplitzStrategy{Toeplitz: t, Workload: w}, nil
}

// Steps is n.
func (s *ToeplitzStrategy) Steps() int { return s.Toeplitz.N }

// Sensitivity is the encoder's sensitivity under the schema, in O(n k).
func (s *ToeplitzStrategy) Sensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	return s.Toeplitz.Sensitivity(schema)
}

// DecoderRowNorms are ||B[i,:]||^2 for B = A C^-1, in O(n) for a Toeplitz
// workload.
func (s *ToeplitzStrategy) DecoderRowNorms() ([]float64, error) {
	return s.Toeplitz.DecoderRowNorms(s.Workload)
}

// Dense is the dense factorization, refused above dpcore.DenseStepLimit steps.
func (s *ToeplitzStrategy) Dense() (*Factorization, error) {
	return s.Toeplitz.Factorization(s.Workload)
}

// Matrices are the dense encoder and decoder (see Dense).
func (s *ToeplitzStrategy) Matrices() (encoder, decoder *mat.Dense, err error) {
	f, err := s.Dense()
	if err != nil {
		return nil, nil, err
	}
	return f.Encoder, f.Decoder, nil
}

// Dense is the dense factorization of a strategy of this package: the
// factorization itself, or a Toeplitz strategy's, built on demand.
func Dense(s dpcore.Strategy) (*Factorization, error) {
	d, ok := s.(interface {
		Dense() (*Factorization, error)
	})
	if !ok || s == nil {
		return nil, invalidf("strategy %T has no dense factorization", s)
	}
	return d.Dense()
}

// EncoderBands is the band count of s's encoder read off its nonzero
// entries, whatever the mechanism declares: the least b with C[i,j] = 0
// whenever j > i or i-j >= b (1 for C = I and for an all-zero C), or 0
// when C is tall or not lower triangular. A Toeplitz encoder is read from
// its first column in O(n); any other from its dense encoder.
func EncoderBands(s dpcore.Strategy) (int, error) {
	if t, ok := s.(*ToeplitzStrategy); ok {
		return lastNonzero(t.Toeplitz.Column()) + 1, nil
	}
	c, _, err := s.Matrices()
	if err != nil {
		return 0, err
	}
	return denseBands(c), nil
}

// lastNonzero is the index of v's last nonzero entry, 0 if there is none.
func lastNonzero(v []float64) int {
	for i := len(v) - 1; i > 0; i-- {
		if v[i] != 0 {
			return i
		}
	}
	return 0
}

// denseBands is EncoderBands of a dense encoder.
func denseBands(c *mat.Dense) int {
	r, n := c.Dims()
	if r != n {
		return 0
	}
	b := 1
	for i := 0; i < n; i++ {
		for j, v := range c.RawRowView(i) {
			if v == 0 {
				continue
			}
			if j > i {
				return 0
			}
			b = max(b, i-j+1)
		}
	}
	return b
}
