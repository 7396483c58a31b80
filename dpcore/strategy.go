package dpcore

import "gonum.org/v1/gonum/mat"

// Strategy is a built correlated-noise mechanism for one workload A: the
// encoder C and decoder B of A = B C over n steps (SPEC 5), in whatever
// representation its family has (dense matrices, or the O(n) description
// of a Toeplitz encoder). The planner holds one, the noise sources stream
// its encoder's noise, and the loss and sensitivity of every mechanism
// come from the same three methods.
type Strategy interface {
	// Steps is n, the number of releases (the workload's size).
	Steps() int
	// Sensitivity is sens(C) under the schema for clipping norm 1
	// (SPEC 3), with whether it is exact and how it was computed.
	Sensitivity(Schema) (SensitivityResult, error)
	// DecoderRowNorms are the squared decoder row norms ||B[i,:]||^2, i <
	// n: step i's error variance for unit noise is sens^2 times the i-th
	// (SPEC 4).
	DecoderRowNorms() ([]float64, error)
	// Matrices are the dense encoder C (m x n, m >= n) and decoder B
	// (n x m). An O(n) strategy builds them on demand and refuses above
	// DenseStepLimit steps with the memory they would need.
	Matrices() (encoder, decoder *mat.Dense, err error)
}

// LossAt is sens^2 ||B||_F^2, the total squared error of the released
// workload for unit noise multiplier at a sensitivity computed elsewhere
// (the schema's, or the per-participation one of amplified accounting):
// the one formula every mechanism's loss comes from (SPEC 4).
func LossAt(s Strategy, sens float64) (float64, error) {
	r, err := s.DecoderRowNorms()
	if err != nil {
		return 0, err
	}
	loss := 0.0
	for _, v := range r {
		loss += sens * sens * v
	}
	return loss, nil
}

// SensitivityMethod says how a sensitivity was obtained (the methods are
// named where they are computed, e.g. in package mfnoise).
type SensitivityMethod string

// SensitivityResult is sens(C) under a schema, for clipping norm 1.
type SensitivityResult struct {
	Value  float64           `json:"value"`
	Exact  bool              `json:"exact"`
	Method SensitivityMethod `json:"method"`
}
