package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// syrkBlock is the order of the diagonal blocks of C left to gonum's
// Xsyrk in the blocked rank-k update; every off-diagonal block row is one
// matrix product. Below 2*syrkBlock (or for tiny k) gonum's loops are as
// fast.
const syrkBlock = 64

// Ssyrk performs the symmetric rank-k update
//
//	C = alpha * A * Aᵀ + beta * C  if tA == blas.NoTrans
//	C = alpha * Aᵀ * A + beta * C  otherwise
//
// on the triangle of the n×n matrix C selected by ul, A being n×k (or k×n)
// and row-major. Semantics and panics are those of gonum's Ssyrk; large
// updates run the off-diagonal blocks through Sgemm.
func (Implementation) Ssyrk(ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	var g gonum.Implementation
	if n < 2*syrkBlock || k < 16 || alpha == 0 {
		g.Ssyrk(ul, tA, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	checkSyrk(ul, tA, n, k, len(a), lda, len(c), ldc)
	syrkBlocked(g.Ssyrk, Sgemm, ul, tA, n, k, alpha, a, lda, beta, c, ldc)
}

// Dsyrk performs the symmetric rank-k update
//
//	C = alpha * A * Aᵀ + beta * C  if tA == blas.NoTrans
//	C = alpha * Aᵀ * A + beta * C  otherwise
//
// on the triangle of the n×n matrix C selected by ul, A being n×k (or k×n)
// and row-major. Semantics and panics are those of gonum's Dsyrk; large
// updates run the off-diagonal blocks through Dgemm.
func (Implementation) Dsyrk(ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha float64, a []float64, lda int, beta float64, c []float64, ldc int) {
	var g gonum.Implementation
	if n < 2*syrkBlock || k < 16 || alpha == 0 {
		g.Dsyrk(ul, tA, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	checkSyrk(ul, tA, n, k, len(a), lda, len(c), ldc)
	syrkBlocked(g.Dsyrk, Dgemm, ul, tA, n, k, alpha, a, lda, beta, c, ldc)
}

const badUplo = "blas: illegal triangle"

// checkSyrk validates the arguments as gonum does, for n > 0.
func checkSyrk(ul gblas.Uplo, tA gblas.Transpose, n, k, la, lda, lc, ldc int) {
	if ul != gblas.Lower && ul != gblas.Upper {
		panic(badUplo)
	}
	if tA != gblas.Trans && tA != gblas.NoTrans && tA != gblas.ConjTrans {
		panic(badTranspose)
	}
	if k < 0 {
		panic(kLT0)
	}
	row, col := k, n
	if tA == gblas.NoTrans {
		row, col = n, k
	}
	if lda < max(1, col) {
		panic(badLdA)
	}
	if ldc < max(1, n) {
		panic(badLdC)
	}
	if la < lda*(row-1)+col {
		panic(shortA)
	}
	if lc < ldc*(n-1)+n {
		panic(shortC)
	}
}

type syrkFunc[T float32 | float64] func(ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha T, a []T, lda int, beta T, c []T, ldc int)

type gemmFunc[T float32 | float64] func(tA, tB gblas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

// syrkBlocked walks the block rows of C: the syrkBlock×syrkBlock diagonal
// block goes to diag, the rest of the block row inside the triangle is
// the product of the block's rows of op(A) with the other rows.
func syrkBlocked[T float32 | float64](diag syrkFunc[T], gemm gemmFunc[T], ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha T, a []T, lda int, beta T, c []T, ldc int) {
	trans := tA != gblas.NoTrans
	// rows returns op(A)[i:, :] as a slice for gemm.
	rows := func(i int) []T {
		if trans {
			return a[i:]
		}
		return a[i*lda:]
	}
	ta, tb := gblas.NoTrans, gblas.Trans
	if trans {
		ta, tb = gblas.Trans, gblas.NoTrans
	}
	for i0 := 0; i0 < n; i0 += syrkBlock {
		i1 := min(i0+syrkBlock, n)
		diag(ul, tA, i1-i0, k, alpha, rows(i0), lda, beta, c[i0*ldc+i0:], ldc)
		if ul == gblas.Upper {
			if i1 < n {
				gemm(ta, tb, i1-i0, n-i1, k, alpha, rows(i0), lda, rows(i1), lda, beta, c[i0*ldc+i1:], ldc)
			}
		} else if i0 > 0 {
			gemm(ta, tb, i1-i0, i0, k, alpha, rows(i0), lda, a, lda, beta, c[i0*ldc:], ldc)
		}
	}
}
