package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
)

// Implementation is gonum's native BLAS with the matrix products replaced
// by this package's Sgemm and Dgemm, and the symmetric rank-k updates
// (Ssyrk, Dsyrk) and triangular solves (Strsm, Dtrsm) blocked so that
// their bulk runs through them. All other routines are gonum's; Cholesky,
// LU and QR factorizations in gonum's lapack reach the fast products
// through their blocked updates.
// The zero value is ready to use.
type Implementation struct {
	gonum.Implementation
}

var (
	_ gblas.Float32   = Implementation{}
	_ gblas.Float64   = Implementation{}
	_ gblas.Complex64 = Implementation{}
)

// Sgemm is the package-level Sgemm.
func (Implementation) Sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is the package-level Dgemm.
func (Implementation) Dgemm(tA, tB gblas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Install makes Implementation the BLAS used by gonum (blas32, blas64 and
// therefore mat and lapack64). It replaces process-wide settings, so call
// it once from main (or a test's setup) before any concurrent linear
// algebra starts. A program that runs gorgonia graphs calls
// gorgoniadp.InstallBLAS instead, which also hands Implementation to
// gorgonia and its tensor package.
func Install() {
	var impl Implementation
	blas32.Use(impl)
	blas64.Use(impl)
}
