package blas

import (
	"runtime"
	"sync"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// trsmBlock is the order of the triangular blocks solved by gonum's Xtrsm
// at the leaves of the recursive solve; everything above the leaves is
// matrix products.
const trsmBlock = 64

// Strsm solves
//
//	op(A) * X = alpha * B  if s == blas.Left
//	X * op(A) = alpha * B  if s == blas.Right
//
// for X, overwriting B, where A is an n×n or m×m triangular matrix and B is
// m×n, all row-major. Semantics and panics are those of gonum's Strsm;
// large solves recurse on halves of A so that most of the work is Sgemm.
func (Implementation) Strsm(s gblas.Side, ul gblas.Uplo, tA gblas.Transpose, d gblas.Diag, m, n int, alpha float32, a []float32, lda int, b []float32, ldb int) {
	var g gonum.Implementation
	if max(m, n) < 2*trsmBlock || alpha == 0 {
		g.Strsm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	checkTrsm(s, ul, tA, d, m, n, len(a), lda, len(b), ldb)
	trsmRec(g.Strsm, Sgemm, s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
}

// Dtrsm solves
//
//	op(A) * X = alpha * B  if s == blas.Left
//	X * op(A) = alpha * B  if s == blas.Right
//
// for X, overwriting B, where A is an n×n or m×m triangular matrix and B is
// m×n, all row-major. Semantics and panics are those of gonum's Dtrsm;
// large solves recurse on halves of A so that most of the work is Dgemm.
func (Implementation) Dtrsm(s gblas.Side, ul gblas.Uplo, tA gblas.Transpose, d gblas.Diag, m, n int, alpha float64, a []float64, lda int, b []float64, ldb int) {
	var g gonum.Implementation
	if max(m, n) < 2*trsmBlock || alpha == 0 {
		g.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	checkTrsm(s, ul, tA, d, m, n, len(a), lda, len(b), ldb)
	trsmRec(g.Dtrsm, Dgemm, s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
}

const (
	badSide = "blas: illegal side"
	badDiag = "blas: illegal diagonal"
)

// checkTrsm validates the arguments as gonum does, for m, n > 0.
func checkTrsm(s gblas.Side, ul gblas.Uplo, tA gblas.Transpose, d gblas.Diag, m, n, la, lda, lb, ldb int) {
	if s != gblas.Left && s != gblas.Right {
		panic(badSide)
	}
	if ul != gblas.Lower && ul != gblas.Upper {
		panic(badUplo)
	}
	if tA != gblas.NoTrans && tA != gblas.Trans && tA != gblas.ConjTrans {
		panic(badTranspose)
	}
	if d != gblas.NonUnit && d != gblas.Unit {
		panic(badDiag)
	}
	if m < 0 {
		panic(mLT0)
	}
	if n < 0 {
		panic(nLT0)
	}
	k := n
	if s == gblas.Left {
		k = m
	}
	if lda < max(1, k) {
		panic(badLdA)
	}
	if ldb < max(1, n) {
		panic(badLdB)
	}
	if la < lda*(k-1)+k {
		panic(shortA)
	}
	if lb < ldb*(m-1)+n {
		panic(shortB)
	}
}

type trsmFunc[T float32 | float64] func(s gblas.Side, ul gblas.Uplo, tA gblas.Transpose, d gblas.Diag, m, n int, alpha T, a []T, lda int, b []T, ldb int)

// trsmRec splits the triangle op(A) = [A11 A12; A21 A22] (one of A12, A21
// zero) in halves, solves for one half of X, subtracts its contribution
// from the other half of B with one gemm, and solves for the other half.
func trsmRec[T float32 | float64](leaf trsmFunc[T], gemm gemmFunc[T], s gblas.Side, ul gblas.Uplo, tA gblas.Transpose, d gblas.Diag, m, n int, alpha T, a []T, lda int, b []T, ldb int) {
	k := n
	if s == gblas.Left {
		k = m
	}
	if k <= trsmBlock {
		trsmLeaf(leaf, s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	k1 := k / 2
	k2 := k - k1
	trans := tA != gblas.NoTrans
	// op(A) is lower triangular when A is lower and not transposed, or
	// upper and transposed.
	lower := (ul == gblas.Lower) != trans
	a11 := a
	a22 := a[k1*lda+k1:]
	// op(A)21 = op(A)[k1:, :k1] and op(A)12 = op(A)[:k1, k1:] as gemm
	// operands: stored block and its transpose flag.
	var off []T
	if lower == trans {
		off = a[k1:] // A[:k1, k1:]
	} else {
		off = a[k1*lda:] // A[k1:, :k1]
	}
	tOff := gblas.NoTrans
	if trans {
		tOff = gblas.Trans
	}
	const one = 1
	if s == gblas.Left {
		b1, b2 := b, b[k1*ldb:]
		if lower {
			// X1 = A11⁻¹ alpha B1; B2 = alpha B2 - A21 X1; X2 = A22⁻¹ B2.
			trsmRec(leaf, gemm, s, ul, tA, d, k1, n, alpha, a11, lda, b1, ldb)
			gemm(tOff, gblas.NoTrans, k2, n, k1, -1, off, lda, b1, ldb, alpha, b2, ldb)
			trsmRec(leaf, gemm, s, ul, tA, d, k2, n, one, a22, lda, b2, ldb)
			return
		}
		// X2 = A22⁻¹ alpha B2; B1 = alpha B1 - A12 X2; X1 = A11⁻¹ B1.
		trsmRec(leaf, gemm, s, ul, tA, d, k2, n, alpha, a22, lda, b2, ldb)
		gemm(tOff, gblas.NoTrans, k1, n, k2, -1, off, lda, b2, ldb, alpha, b1, ldb)
		trsmRec(leaf, gemm, s, ul, tA, d, k1, n, one, a11, lda, b1, ldb)
		return
	}
	b1, b2 := b, b[k1:]
	if lower {
		// X2 = alpha B2 A22⁻¹; B1 = alpha B1 - X2 A21; X1 = B1 A11⁻¹.
		trsmRec(leaf, gemm, s, ul, tA, d, m, k2, alpha, a22, lda, b2, ldb)
		gemm(gblas.NoTrans, tOff, m, k1, k2, -1, b2, ldb, off, lda, alpha, b1, ldb)
		trsmRec(leaf, gemm, s, ul, tA, d, m, k1, one, a11, lda, b1, ldb)
		return
	}
	// X1 = alpha B1 A11⁻¹; B2 = alpha B2 - X1 A12; X2 = B2 A22⁻¹.
	trsmRec(leaf, gemm, s, ul, tA, d, m, k1, alpha, a11, lda, b1, ldb)
	gemm(gblas.NoTrans, tOff, m, k2, k1, -1, b1, ldb, off, lda, alpha, b2, ldb)
	trsmRec(leaf, gemm, s, ul, tA, d, m, k2, one, a22, lda, b2, ldb)
}

// trsmLeafSplit is the number of right-hand sides above which a leaf solve
// is split across goroutines: the leaves are gonum's unblocked solves
// (level-2 speed), which at n = 2000 were a fifth of a dense solve's time
// on one core.
const trsmLeafSplit = 256

// trsmLeaf runs the leaf solve, splitting the independent right-hand sides
// (columns of B for Left, rows for Right) over GOMAXPROCS goroutines.
func trsmLeaf[T float32 | float64](leaf trsmFunc[T], s gblas.Side, ul gblas.Uplo, tA gblas.Transpose, d gblas.Diag, m, n int, alpha T, a []T, lda int, b []T, ldb int) {
	rhs := n
	if s == gblas.Right {
		rhs = m
	}
	procs := min(runtime.GOMAXPROCS(0), rhs/(trsmLeafSplit/2))
	if rhs < trsmLeafSplit || procs < 2 {
		leaf(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < procs; p++ {
		lo, hi := p*rhs/procs, (p+1)*rhs/procs
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s == gblas.Left {
				leaf(s, ul, tA, d, m, hi-lo, alpha, a, lda, b[lo:], ldb)
			} else {
				leaf(s, ul, tA, d, hi-lo, n, alpha, a, lda, b[lo*ldb:], ldb)
			}
		}()
	}
	wg.Wait()
}
