package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Serial32 computes float32 matrix products on the calling goroutine only,
// with packing buffers it owns: for callers that run many independent
// products in parallel themselves (one Serial32 per goroutine) and must
// not allocate per call. The zero value is ready to use; a Serial32 is not
// safe for concurrent use.
type Serial32 struct {
	buf []float32
}

// Sgemm is the package-level Sgemm without its goroutines: same arguments,
// semantics and panics. Matrix-vector shapes (m or n = 1) also take the
// packed path, where the package-level Sgemm hands them to gonum, whose
// large products start goroutines of their own.
func (s *Serial32) Sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	if m*n*k <= smallWork {
		// gonum's loops, serial at this size.
		gonum.Implementation{}.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if alpha == 0 || k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	op := gemmOp[float32]{kern: kernel32(), aTrans: isTrans(tA), bTrans: isTrans(tB), k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	if need := op.bufLen(0, m, 0, n); len(s.buf) < need {
		s.buf = make([]float32, need)
	}
	op.runBuf(s.buf, 0, m, 0, n)
}
