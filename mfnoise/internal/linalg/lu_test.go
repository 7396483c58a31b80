package linalg

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// TestLUFactorMatchesLAPACK compares LUFactor with gonum's dgetrf: same
// pivots, factors equal to round-off, on sizes around the recursion's
// block boundaries, with a stride wider than the matrix.
func TestLUFactorMatchesLAPACK(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 16, 17, 33, 100, 257} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			lda := n + 3
			a := make([]float64, n*lda)
			for i := range a {
				a[i] = rng.NormFloat64()
			}
			ref := append([]float64(nil), a...)
			ipiv, refPiv := make([]int, n), make([]int, n)
			if !LUFactor(n, a, lda, ipiv) {
				t.Fatal("reported singular")
			}
			lapack64.Getrf(mat.NewDense(n, lda, ref).Slice(0, n, 0, n).(*mat.Dense).RawMatrix(), refPiv)
			for i := range ipiv {
				if ipiv[i] != refPiv[i] {
					t.Fatalf("pivot %d: %d, dgetrf %d", i, ipiv[i], refPiv[i])
				}
			}
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					if d := a[i*lda+j] - ref[i*lda+j]; d > 1e-10 || d < -1e-10 {
						t.Fatalf("entry (%d,%d): %v, dgetrf %v", i, j, a[i*lda+j], ref[i*lda+j])
					}
				}
				for j := n; j < lda; j++ {
					if a[i*lda+j] != ref[i*lda+j] {
						t.Fatalf("padding (%d,%d) changed", i, j)
					}
				}
			}
		})
	}
	a := []float64{1, 2, 2, 4}
	if LUFactor(2, a, 2, make([]int, 2)) {
		t.Error("singular matrix not reported")
	}
}
