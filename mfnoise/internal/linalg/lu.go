package linalg

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// luBlock is the panel width below which LUFactor eliminates column by
// column.
const luBlock = 16

// LUFactor computes the LU factorization with partial pivoting P A = L U
// of the row-major n x n matrix in a (stride lda) in place, in the format
// of LAPACK's dgetrf (L unit lower triangular below the diagonal, U on and
// above it, row i interchanged with row ipiv[i] in order), so that
// lapack64.Getrs can solve with it. It returns false if U is exactly
// singular.
//
// It is Toledo's recursive LU (SIAM J. Matrix Anal. Appl. 18(4), 1997):
// factor the left half of the columns, update the right half with one
// triangular solve and one matrix product, factor the lower right block.
// Nearly all the work is then in Gemm and Trsm on the process-wide BLAS,
// where gonum's blocked dgetrf spends a fifth of its time in its unblocked
// panel factorization (strided column operations on row-major storage).
func LUFactor(n int, a []float64, lda int, ipiv []int) bool {
	return luRec(n, n, a, lda, ipiv)
}

// luRec factors the m x n panel (m >= n) at a, recording pivots relative
// to its first row.
func luRec(m, n int, a []float64, lda int, ipiv []int) bool {
	if n <= luBlock {
		return luPanel(m, n, a, lda, ipiv)
	}
	n1 := n / 2
	n2 := n - n1
	ok := luRec(m, n1, a, lda, ipiv[:n1])
	swapRows(a[n1:], lda, n2, ipiv[:n1], 0)
	// A12 = L11^-1 A12; A22 -= A21 A12.
	blas64.Trsm(blas.Left, blas.NoTrans, 1,
		blas64.Triangular{Uplo: blas.Lower, Diag: blas.Unit, N: n1, Stride: lda, Data: a},
		blas64.General{Rows: n1, Cols: n2, Stride: lda, Data: a[n1:]})
	blas64.Gemm(blas.NoTrans, blas.NoTrans, -1,
		blas64.General{Rows: m - n1, Cols: n1, Stride: lda, Data: a[n1*lda:]},
		blas64.General{Rows: n1, Cols: n2, Stride: lda, Data: a[n1:]},
		1, blas64.General{Rows: m - n1, Cols: n2, Stride: lda, Data: a[n1*lda+n1:]})
	ok2 := luRec(m-n1, n2, a[n1*lda+n1:], lda, ipiv[n1:])
	for i := n1; i < n; i++ {
		ipiv[i] += n1
	}
	swapRows(a, lda, n1, ipiv[n1:], n1)
	return ok && ok2
}

// swapRows applies the interchanges ipiv (row first+i with row ipiv[i])
// to the first cols columns of the rows of a.
func swapRows(a []float64, lda, cols int, ipiv []int, first int) {
	for i, p := range ipiv {
		if r := first + i; p != r {
			ri, rp := a[r*lda:r*lda+cols], a[p*lda:p*lda+cols]
			for j := range ri {
				ri[j], rp[j] = rp[j], ri[j]
			}
		}
	}
}

// luPanel is the unblocked right-looking elimination of an m x n panel.
func luPanel(m, n int, a []float64, lda int, ipiv []int) bool {
	ok := true
	for j := 0; j < n; j++ {
		p, best := j, math.Abs(a[j*lda+j])
		for i := j + 1; i < m; i++ {
			if v := math.Abs(a[i*lda+j]); v > best {
				p, best = i, v
			}
		}
		ipiv[j] = p
		if p != j {
			rj, rp := a[j*lda:j*lda+n], a[p*lda:p*lda+n]
			for c := range rj {
				rj[c], rp[c] = rp[c], rj[c]
			}
		}
		piv := a[j*lda+j]
		if piv == 0 {
			ok = false
			continue
		}
		rowJ := a[j*lda+j+1 : j*lda+n]
		for i := j + 1; i < m; i++ {
			ri := a[i*lda : i*lda+n]
			l := ri[j] / piv
			ri[j] = l
			for c, u := range rowJ {
				ri[j+1+c] -= l * u
			}
		}
	}
	return ok
}
