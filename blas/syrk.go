package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// syrkBlock is the order of the diagonal blocks of C in the blocked
// rank-k update; each block row is two matrix products. Below
// 2*syrkBlock (or for tiny k) gonum's loops are as fast.
const syrkBlock = 96

// Ssyrk performs the symmetric rank-k update
//
//	C = alpha * A * Aᵀ + beta * C  if tA == blas.NoTrans
//	C = alpha * Aᵀ * A + beta * C  otherwise
//
// on the triangle of the n×n matrix C selected by ul, A being n×k (or k×n)
// and row-major. Semantics and panics are those of gonum's Ssyrk; large
// updates run the off-diagonal blocks through Sgemm.
func (Implementation) Ssyrk(ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	if !checkSyrk(ul, tA, n, k, len(a), lda, len(c), ldc) {
		return
	}
	if beta == 0 {
		// BLAS overwrites C when beta is zero, NaN included; gonum's
		// Ssyrk keeps NaN for a lower triangle and transposed A.
		clearTriangle(ul, n, c, ldc)
	}
	if n < 2*syrkBlock || k < 16 || alpha == 0 {
		gonum.Implementation{}.Ssyrk(ul, tA, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	syrkBlocked(Sgemm, ul, tA, n, k, alpha, a, lda, beta, c, ldc)
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
	if !checkSyrk(ul, tA, n, k, len(a), lda, len(c), ldc) {
		return
	}
	if beta == 0 {
		// BLAS overwrites C when beta is zero, NaN included; gonum's
		// Dsyrk keeps NaN for a lower triangle and transposed A.
		clearTriangle(ul, n, c, ldc)
	}
	if n < 2*syrkBlock || k < 16 || alpha == 0 {
		gonum.Implementation{}.Dsyrk(ul, tA, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	syrkBlocked(Dgemm, ul, tA, n, k, alpha, a, lda, beta, c, ldc)
}

const badUplo = "blas: illegal triangle"

// clearTriangle zeros the ul triangle of the n×n matrix c.
func clearTriangle[T float32 | float64](ul gblas.Uplo, n int, c []T, ldc int) {
	for i := range n {
		if ul == gblas.Upper {
			clear(c[i*ldc+i : i*ldc+n])
		} else {
			clear(c[i*ldc : i*ldc+i+1])
		}
	}
}

// checkSyrk validates the arguments as gonum does (panicking with its
// messages) and reports whether there is work to do.
func checkSyrk(ul gblas.Uplo, tA gblas.Transpose, n, k, la, lda, lc, ldc int) bool {
	if ul != gblas.Lower && ul != gblas.Upper {
		panic(badUplo)
	}
	if tA != gblas.Trans && tA != gblas.NoTrans && tA != gblas.ConjTrans {
		panic(badTranspose)
	}
	if n < 0 {
		panic(nLT0)
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
	if n == 0 {
		return false
	}
	if la < lda*(row-1)+col {
		panic(shortA)
	}
	if lc < ldc*(n-1)+n {
		panic(shortC)
	}
	return true
}

type gemmFunc[T float32 | float64] func(tA, tB gblas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

// syrkBlocked walks the block rows of C. The syrkBlock×syrkBlock diagonal
// block is computed in full by gemm into a scratch square (twice the
// flops of its triangle, but at gemm speed rather than that of gonum's
// loops) and its triangle merged into C; the rest of the block row inside
// the triangle is the product of the block's rows of op(A) with the other
// rows.
func syrkBlocked[T float32 | float64](gemm gemmFunc[T], ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha T, a []T, lda int, beta T, c []T, ldc int) {
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
	tmp := make([]T, syrkBlock*syrkBlock)
	for i0 := 0; i0 < n; i0 += syrkBlock {
		i1 := min(i0+syrkBlock, n)
		nb := i1 - i0
		gemm(ta, tb, nb, nb, k, alpha, rows(i0), lda, rows(i0), lda, 0, tmp, nb)
		for i := range nb {
			lo, hi := i, nb // upper: columns i..nb-1 of row i
			if ul == gblas.Lower {
				lo, hi = 0, i+1
			}
			dst := c[(i0+i)*ldc+i0+lo : (i0+i)*ldc+i0+hi]
			src := tmp[i*nb+lo : i*nb+hi]
			if beta == 0 {
				copy(dst, src)
				continue
			}
			for j, v := range src {
				dst[j] = beta*dst[j] + v
			}
		}
		if ul == gblas.Upper {
			if i1 < n {
				gemm(ta, tb, nb, n-i1, k, alpha, rows(i0), lda, rows(i1), lda, beta, c[i0*ldc+i1:], ldc)
			}
		} else if i0 > 0 {
			gemm(ta, tb, nb, i0, k, alpha, rows(i0), lda, a, lda, beta, c[i0*ldc:], ldc)
		}
	}
}
