package nn

import (
	"time"

	"github.com/dpmf-go/dpmf/blas"
	gblas "gonum.org/v1/gonum/blas"
)

// sgemm is the worker's product, logged while a log is attached.
func (w *seqWorker) sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if w.log != nil {
		t0 := w.log.start()
		w.gemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		w.log.done(Product{TransA: tA == gblas.Trans, TransB: tB == gblas.Trans, M: m, N: n, K: k, LDA: lda, LDB: ldb, LDC: ldc, Beta: beta, Count: 1}, t0)
		return
	}
	w.gemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmPacked is the worker's product with a right operand packed once
// per step, logged while a log is attached.
func (w *seqWorker) sgemmPacked(m int, a []float32, lda int, b *blas.PackedB32, beta float32, c []float32, ldc int) {
	if w.log != nil {
		k, n := b.Dims()
		t0 := w.log.start()
		w.gemm.SgemmPacked(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
		w.log.done(Product{PackedB: true, M: m, N: n, K: k, LDA: lda, LDB: n, LDC: ldc, Beta: beta, Count: 1}, t0)
		return
	}
	w.gemm.SgemmPacked(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
}

// dgemm is the worker's float64 product, logged while a log is attached.
func (w *seqWorker) dgemm(tA, tB gblas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	dgemmLogged(w.log, &w.gemm64, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// RecordProducts starts logging the matrix products the plan's calls
// make (every worker's, grouped by shape), or with on false stops and
// forgets them, as Plan.RecordProducts.
func (p *SeqPlan) RecordProducts(on bool) {
	for _, w := range p.workers {
		w.log = nil
		if on {
			w.log = &productLog{}
		}
	}
}

// Products returns the products logged since RecordProducts(true), in
// the order first made.
func (p *SeqPlan) Products() []Product {
	logs := make([]*productLog, len(p.workers))
	for k, w := range p.workers {
		logs[k] = w.log
	}
	return merged(logs)
}

// Workers is the number of goroutines a step runs on.
func (p *SeqPlan) Workers() int { return len(p.workers) }

// TimeProducts times each product alone on the calling goroutine and
// returns the sum over the list of Count times its time, as
// Plan.TimeProducts (operands from a worker's buffers).
func (p *SeqPlan) TimeProducts(list []Product, minTime time.Duration) (time.Duration, error) {
	w := p.workers[0]
	var bufs [][]float32
	for _, set := range [][][]float32{w.in, w.mid, w.att, w.qkv, w.z, w.f, w.th, w.p, w.xh1, w.a1, w.a2, w.g,
		{w.h0, w.dh, w.dh2, w.da, w.dbig, w.dqkv, w.dp, w.ex, w.acc}} {
		for _, b := range set {
			if len(b) > 0 {
				bufs = append(bufs, b)
			}
		}
	}
	return timeProducts(list, minTime, bufs)
}
