package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestSyrk compares the blocked Dsyrk and Ssyrk with gonum's on both
// triangles and transposes, with strides, checking that the other
// triangle is left alone.
func TestSyrk(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, sh := range [][2]int{{250, 70}, {200, 33}, {300, 128}, {40, 50}} {
		n, k := sh[0], sh[1]
		for _, ul := range []gblas.Uplo{gblas.Upper, gblas.Lower} {
			for _, tA := range []gblas.Transpose{gblas.NoTrans, gblas.Trans} {
				for _, ab := range [][2]float64{{1, 0}, {-0.5, 1}, {2, -1.5}} {
					row, col := n, k
					if tA == gblas.Trans {
						row, col = k, n
					}
					lda, ldc := col+3, n+2
					a := make([]float64, row*lda)
					c := make([]float64, n*ldc)
					for i := range a {
						a[i] = rng.NormFloat64()
					}
					for i := range c {
						c[i] = rng.NormFloat64()
					}
					want := append([]float64(nil), c...)
					if ab[1] == 0 {
						// With beta = 0 the triangle must be overwritten
						// even where it holds NaN (as in reference BLAS;
						// gonum's Dsyrk keeps the NaN when A is
						// transposed), so the reference starts from zeros.
						for i := range n {
							for j := range n {
								if (ul == gblas.Upper) == (j >= i) {
									c[i*ldc+j], want[i*ldc+j] = math.NaN(), 0
								}
							}
						}
					}
					gonum.Implementation{}.Dsyrk(ul, tA, n, k, ab[0], a, lda, ab[1], want, ldc)
					Implementation{}.Dsyrk(ul, tA, n, k, ab[0], a, lda, ab[1], c, ldc)
					for i := range c {
						if math.IsNaN(c[i]) != math.IsNaN(want[i]) || math.Abs(c[i]-want[i]) > 1e-12*float64(k) {
							t.Fatalf("Dsyrk n=%d k=%d ul=%c tA=%c ab=%v: c[%d] = %v, want %v", n, k, ul, tA, ab, i, c[i], want[i])
						}
					}
					a32 := make([]float32, len(a))
					c32 := make([]float32, len(c))
					for i, v := range a {
						a32[i] = float32(v)
					}
					for i := range c32 {
						c32[i] = float32(rng.NormFloat64())
					}
					want32 := append([]float32(nil), c32...)
					gonum.Implementation{}.Ssyrk(ul, tA, n, k, float32(ab[0]), a32, lda, float32(ab[1]), want32, ldc)
					Implementation{}.Ssyrk(ul, tA, n, k, float32(ab[0]), a32, lda, float32(ab[1]), c32, ldc)
					for i := range c32 {
						if math.IsNaN(float64(c32[i])) != math.IsNaN(float64(want32[i])) || math.Abs(float64(c32[i]-want32[i])) > 1e-5*float64(k) {
							t.Fatalf("Ssyrk n=%d k=%d ul=%c tA=%c ab=%v: c[%d] = %v, want %v", n, k, ul, tA, ab, i, c32[i], want32[i])
						}
					}
				}
			}
		}
	}
}
