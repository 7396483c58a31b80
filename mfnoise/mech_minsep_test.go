package mfnoise

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// The min-sep bound must dominate the true max over patterns of
// sum_{i,j in pi} |X_ij| for any C, and equal it for a banded C.
func TestMinSepBoundAgainstEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, k, b = 10, 3, 3
	pats := mftest.MinSepPatterns(n, k, b)
	for _, banded := range []bool{true, false} {
		c := mat.NewDense(n, n, nil)
		for i := 0; i < n; i++ {
			for j := 0; j <= i; j++ {
				if !banded || i-j < b {
					c.Set(i, j, rng.NormFloat64())
				}
			}
		}
		x := linalg.Gram(c)
		want := 0.0
		for _, p := range pats {
			sum := 0.0
			for _, i := range p {
				for _, j := range p {
					sum += math.Abs(x.At(i, j))
				}
			}
			want = math.Max(want, sum)
		}
		schema, _ := dpcore.MinSepParticipation(k, b)
		r, err := sensitivity.Of(c, schema)
		if err != nil {
			t.Fatal(err)
		}
		got := r.Value * r.Value
		if banded && (math.Abs(got-want) > 1e-10*want || !r.Exact) {
			t.Fatalf("banded: DP %v (exact %v), enumeration %v", got, r.Exact, want)
		}
		if !banded && (got < want*(1-1e-12) || r.Exact) {
			t.Fatalf("dense: DP bound %v below enumeration %v (exact %v)", got, want, r.Exact)
		}
	}
}
