package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestTrsm compares the recursive Dtrsm and Strsm with gonum's for every
// side, triangle, transpose and diagonal kind, with strides. A is
// diagonally dominant so that both solves are accurate to a few ulps
// times the order. The last two shapes have enough right-hand sides for
// the leaf solves to be split across goroutines.
func TestTrsm(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, sh := range [][2]int{{150, 70}, {70, 150}, {200, 131}, {150, 600}, {600, 150}} {
		m, n := sh[0], sh[1]
		for _, s := range []gblas.Side{gblas.Left, gblas.Right} {
			k := n
			if s == gblas.Left {
				k = m
			}
			lda, ldb := k+2, n+3
			a := make([]float64, k*lda)
			for i := range a {
				a[i] = rng.NormFloat64() / float64(k)
			}
			for i := range k {
				a[i*lda+i] = 2 + rng.Float64()
			}
			for _, ul := range []gblas.Uplo{gblas.Upper, gblas.Lower} {
				for _, tA := range []gblas.Transpose{gblas.NoTrans, gblas.Trans} {
					for _, d := range []gblas.Diag{gblas.NonUnit, gblas.Unit} {
						for _, alpha := range []float64{1, -0.75} {
							b := make([]float64, m*ldb)
							for i := range b {
								b[i] = rng.NormFloat64()
							}
							want := append([]float64(nil), b...)
							gonum.Implementation{}.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, want, ldb)
							Implementation{}.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
							for i := range b {
								if math.Abs(b[i]-want[i]) > 1e-12*float64(k)*(1+math.Abs(want[i])) {
									t.Fatalf("Dtrsm m=%d n=%d s=%c ul=%c tA=%c d=%c alpha=%v: b[%d] = %v, want %v", m, n, s, ul, tA, d, alpha, i, b[i], want[i])
								}
							}
							a32 := make([]float32, len(a))
							for i, v := range a {
								a32[i] = float32(v)
							}
							b32 := make([]float32, len(b))
							for i := range b32 {
								b32[i] = float32(rng.NormFloat64())
							}
							want32 := append([]float32(nil), b32...)
							gonum.Implementation{}.Strsm(s, ul, tA, d, m, n, float32(alpha), a32, lda, want32, ldb)
							Implementation{}.Strsm(s, ul, tA, d, m, n, float32(alpha), a32, lda, b32, ldb)
							for i := range b32 {
								if math.Abs(float64(b32[i]-want32[i])) > 1e-5*float64(k)*(1+math.Abs(float64(want32[i]))) {
									t.Fatalf("Strsm m=%d n=%d s=%c ul=%c tA=%c d=%c alpha=%v: b[%d] = %v, want %v", m, n, s, ul, tA, d, alpha, i, b32[i], want32[i])
								}
							}
						}
					}
				}
			}
		}
	}
}
