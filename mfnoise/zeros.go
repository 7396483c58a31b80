package mfnoise

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// StructuralZeroTol is the relative threshold below which an entry of a
// mechanism's matrix (C, the decoder B, or G = A^-1 B) is a structural
// zero: |x| <= StructuralZeroTol * max|x|, the largest entry of the same
// matrix (StructuralZeroCutoff). Dropping entries of G changes W_i by sum
// over the dropped j of G[i,j] z_j, a Gaussian with standard deviation at
// most sqrt(m) * StructuralZeroTol * max|G| (below 1e-11 max|G| for m =
// 4096): far below float32 resolution (6e-8) and below
// FactorizationTolerance (1e-9), the slack NewFactorization already allows
// in A = BC. The noise added is thus the mechanism's to within the
// accuracy the project already accepts. Entries that are zero in exact
// arithmetic (trees, stamps, bands) come out of A^-1 B as rounding
// residue, measured at or below about 1e-13 max|G| for tree decoders
// under prefix and momentum workloads up to n = 2048, and are caught by
// it; a residue entry that survives costs memory, not accuracy.
const StructuralZeroTol = 1e-13

// StructuralZeroCutoff is the one rule for structural zeros: an entry x
// of m is one when |x| <= StructuralZeroCutoff(m) = StructuralZeroTol *
// max_ij |m_ij|, measured against the largest entry (not a row or column
// sum, which grows with n). The noise streams (package noise), the exact
// release's decoder (package aggregate) and PrefixSensitivity use it, so
// the rows a release reads and the rows a prefix's sensitivity counts are
// the same. NaN if m holds a NaN.
func StructuralZeroCutoff(m mat.Matrix) float64 {
	mx := 0.0
	if d, ok := m.(*mat.Dense); ok {
		r, c := d.Dims()
		for i := range r {
			for _, v := range d.RawRowView(i)[:c] {
				mx = max(mx, math.Abs(v))
			}
		}
		return StructuralZeroTol * mx
	}
	r, c := m.Dims()
	for i := range r {
		for j := range c {
			mx = max(mx, math.Abs(m.At(i, j)))
		}
	}
	return StructuralZeroTol * mx
}
