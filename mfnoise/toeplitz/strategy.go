package toeplitz

import (
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"gonum.org/v1/gonum/mat"
)

// Strategy is a Toeplitz encoder bound to the workload A it decodes (B = A
// C^-1): the dpcore.Strategy of the Toeplitz mechanisms, whose
// sensitivity, loss and noise need no n x n matrix.
type Strategy struct {
	Encoder  *Encoder
	Workload dpcore.Workload
}

// For binds t to workload w, which must have t.N steps.
func (t *Encoder) For(w dpcore.Workload) (*Strategy, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if w.N != t.N {
		return nil, guard.Invalidf("toeplitz %s: workload has %d steps, the mechanism %d", t.Name, w.N, t.N)
	}
	return &Strategy{Encoder: t, Workload: w}, nil
}

// Steps is n.
func (s *Strategy) Steps() int { return s.Encoder.N }

// Sensitivity is the encoder's sensitivity under the schema, in O(n k).
func (s *Strategy) Sensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	return s.Encoder.Sensitivity(schema)
}

// DecoderRowNorms are ||B[i,:]||^2 for B = A C^-1, in O(n) for a Toeplitz
// workload.
func (s *Strategy) DecoderRowNorms() ([]float64, error) {
	return s.Encoder.DecoderRowNorms(s.Workload)
}

// Matrices are the dense encoder and decoder, refused above
// dpcore.DenseStepLimit steps.
func (s *Strategy) Matrices() (encoder, decoder *mat.Dense, err error) {
	return s.Encoder.Matrices(s.Workload)
}
