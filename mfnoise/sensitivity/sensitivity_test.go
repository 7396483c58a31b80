package sensitivity

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
)

func TestVecSensContainingMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, k, b = 11, 3, 3
	pats := mftest.MinSepPatterns(n, k, b)
	sc := newVecSensScratch(n, k)
	for trial := 0; trial < 20; trial++ {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.Float64()
		}
		for i := 0; i < n; i++ {
			want := 0.0
			for _, p := range pats {
				has, sum := false, 0.0
				for _, j := range p {
					has = has || j == i
					sum += v[j]
				}
				if has {
					want = math.Max(want, sum)
				}
			}
			if got := sc.containing(v, i, k, b); math.Abs(got-want) > 1e-12 {
				t.Fatalf("containing(i=%d) = %v, enumeration %v", i, got, want)
			}
		}
	}
}
