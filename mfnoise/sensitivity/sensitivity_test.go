package sensitivity

import (
	"math"
	"math/rand/v2"
	"testing"
)

// minSepPatterns enumerates every nonempty pattern of at most k steps of
// 0..n-1 with gaps >= b.
func minSepPatterns(n, k, b int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) > 0 {
			out = append(out, append([]int(nil), cur...))
		}
		if len(cur) == k {
			return
		}
		for i := start; i < n; i++ {
			rec(i+b, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

func TestVecSensContainingMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, k, b = 11, 3, 3
	pats := minSepPatterns(n, k, b)
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
