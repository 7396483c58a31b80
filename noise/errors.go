package noise

import (
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/dpmf-go/dpmf/dpcore"
)

// invalidf is a bad-argument error of this package: it wraps
// dpcore.ErrInvalid, the one sentinel of the privacy stack.
func invalidf(format string, args ...any) error {
	return dpcore.Invalid("noise", format, args...)
}

func finiteFloat(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// checkFinite refuses a matrix with a NaN or infinite entry, which would
// pass every structural-zero test and vanish silently from the noise.
func checkFinite(what string, a mat.Matrix) error {
	r, c := a.Dims()
	for i := range r {
		for j := range c {
			if v := a.At(i, j); !finiteFloat(v) {
				return invalidf("%s entry (%d,%d) is %v", what, i, j, v)
			}
		}
	}
	return nil
}
