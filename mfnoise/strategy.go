package mfnoise

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"gonum.org/v1/gonum/mat"
)

// The two representations of a built mechanism are dpcore.Strategy values:
// the dense *Factorization, and the O(n) *toeplitz.Strategy (a Toeplitz
// encoder with the workload it decodes). Package noise streams either.

// Steps is n: a Factorization is a dpcore.Strategy.
func (f *Factorization) Steps() int { return f.N() }

// DecoderRowNorms are ||B[i,:]||^2 for every step i.
func (f *Factorization) DecoderRowNorms() ([]float64, error) { return rowNorms2(f.Decoder), nil }

// Matrices are the encoder C and decoder B.
func (f *Factorization) Matrices() (encoder, decoder *mat.Dense, err error) {
	return f.Encoder, f.Decoder, nil
}

// Dense is the dense factorization of a strategy of this package: the
// factorization itself, or a Toeplitz strategy's, built on demand (refused
// above dpcore.DenseStepLimit steps) and carrying its encoder (see
// Factorization.Toeplitz).
func Dense(s dpcore.Strategy) (*Factorization, error) {
	switch s := s.(type) {
	case *Factorization:
		if s != nil {
			return s, nil
		}
	case *toeplitz.Strategy:
		if s != nil {
			return toeplitzFactorization(s)
		}
	case *BandedStrategy:
		if s != nil {
			c, b, err := s.Matrices()
			if err != nil {
				return nil, err
			}
			return NewFactorization(s.Workload, c, b, Metadata{Kind: "bandmf", Bands: s.Encoder.Bands})
		}
	}
	return nil, guard.Invalidf("strategy %T has no dense factorization", s)
}

// toeplitzFactorization is the dense factorization of a Toeplitz strategy.
func toeplitzFactorization(s *toeplitz.Strategy) (*Factorization, error) {
	t := s.Encoder
	c, b, err := t.Matrices(s.Workload)
	if err != nil {
		return nil, err
	}
	meta := Metadata{Kind: t.Name, Bands: t.Bands(), Decoder: "workload-times-inverse"}
	f, err := NewFactorization(s.Workload, c, b, meta)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: toeplitz %s: %w", t.Name, err)
	}
	f.toeplitz = t
	return f, nil
}

// EncoderBands is the band count of s's encoder read off its nonzero
// entries, whatever the mechanism declares: the least b with C[i,j] = 0
// whenever j > i or i-j >= b (1 for C = I and for an all-zero C), or 0
// when C is tall or not lower triangular. A Toeplitz encoder is read from
// its first column in O(n), a banded one from its band; any other from
// its dense encoder.
func EncoderBands(s dpcore.Strategy) (int, error) {
	if t, ok := s.(*toeplitz.Strategy); ok {
		return lastNonzero(t.Encoder.Column()) + 1, nil
	}
	if b, ok := s.(*BandedStrategy); ok {
		return b.Encoder.bandsUsed(), nil
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

// bandsUsed is EncoderBands of a banded encoder, read off its band.
func (e *BandedEncoder) bandsUsed() int {
	b := 1
	for j := 0; j < e.N; j++ {
		col := e.Band[j*e.Bands : (j+1)*e.Bands]
		b = max(b, lastNonzero(col)+1)
	}
	return b
}

// EncoderRows is m, the number of rows of s's encoder: n for the square
// O(n) strategies (Toeplitz, banded) without building a matrix, else read
// off the dense encoder.
func EncoderRows(s dpcore.Strategy) (int, error) {
	switch s.(type) {
	case *toeplitz.Strategy, *BandedStrategy:
		return s.Steps(), nil
	}
	c, _, err := s.Matrices()
	if err != nil {
		return 0, err
	}
	m, _ := c.Dims()
	return m, nil
}
