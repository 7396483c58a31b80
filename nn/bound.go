package nn

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/rusage"
	gblas "gonum.org/v1/gonum/blas"
)

// Product is one shape of matrix product a step makes: C (M x N) =
// op(A) (M x K) op(B) (K x N) + Beta C, with A and B row-major at leading
// dimensions LDA and LDB as the step passes them, Count times. PackedB
// marks a right operand the step packed beforehand (a weight, packed once
// per step).
type Product struct {
	TransA, TransB bool
	PackedB        bool
	M, N, K        int
	LDA, LDB, LDC  int
	Beta           float32
	Count          int
	// Float64 marks a product in float64 (Beta is then its beta rounded
	// to float32): the ghost norms' Gram matrices.
	Float64 bool
	// KPeriod and KKeep, when KPeriod > 0, mark a product whose sum over
	// K takes only the steps p with p mod KPeriod < KKeep (B packed by
	// blas.PackB32Runs): an implicit convolution's weight gradient
	// skipping its garbage columns. Flops counts those steps only.
	KPeriod, KKeep int
	// MPeriod and MKeep, when MPeriod > 0, mark a product computing only
	// the rows i of C with i mod MPeriod < MKeep (blas.Serial32's
	// SgemmPackedRows): an implicit convolution's forward or input
	// gradient without its garbage rows. Flops counts those rows only.
	MPeriod, MKeep int
	// InPlace marks a large dense layer's product that reads the layer's
	// weight W (fi x fo) where it is stored, four rows at a time (the
	// forward product, B = W; or, TransB, the input gradient, B = Wᵀ),
	// not a packed copy; TimeProducts times it with the same kernels.
	InPlace bool
	// InStep is the time the logged calls of this shape took inside the
	// step, summed: by the calling thread's CPU clock where the system
	// keeps one (Linux), else zero. Against TimeProducts' time alone it
	// shows what the step's cache state costs each product. The clock's
	// own reads add to it (about 5 µs a product when both workers read
	// at once on a 2-core machine): the ratio of a product of a few tens
	// of µs reads high; the step's own CPU time is the measure for it.
	InStep time.Duration
}

// Flops is 2 M N K, the product's multiply-adds counted as two (K the
// steps summed, with KPeriod).
func (q Product) Flops() float64 {
	return 2 * float64(q.rows()) * float64(q.N) * float64(q.steps())
}

// rows is the number of rows of C the product computes.
func (q Product) rows() int {
	if q.MPeriod <= 0 {
		return q.M
	}
	return q.M/q.MPeriod*q.MKeep + min(q.M%q.MPeriod, q.MKeep)
}

// steps is the number of steps of K the product sums.
func (q Product) steps() int {
	if q.KPeriod <= 0 {
		return q.K
	}
	return q.K/q.KPeriod*q.KKeep + min(q.K%q.KPeriod, q.KKeep)
}

// productLog collects the products of one worker.
type productLog struct{ list []Product }

// start begins timing one logged product on the calling thread; done
// ends it.
func (l *productLog) start() time.Duration {
	runtime.LockOSThread() // the thread's CPU clock times the product
	t, _ := rusage.ThreadCPU()
	return t
}

// done logs q, made since start returned t0.
func (l *productLog) done(q Product, t0 time.Duration) {
	if t, ok := rusage.ThreadCPU(); ok {
		q.InStep = t - t0
	}
	runtime.UnlockOSThread()
	l.add(q)
}

func (l *productLog) add(q Product) {
	for k := range l.list {
		r := &l.list[k]
		if r.TransA == q.TransA && r.TransB == q.TransB && r.M == q.M && r.N == q.N && r.K == q.K &&
			r.LDA == q.LDA && r.LDB == q.LDB && r.LDC == q.LDC && r.Beta == q.Beta && r.PackedB == q.PackedB && r.Float64 == q.Float64 && r.InPlace == q.InPlace &&
			r.KPeriod == q.KPeriod && r.KKeep == q.KKeep && r.MPeriod == q.MPeriod && r.MKeep == q.MKeep {
			r.Count += q.Count
			r.InStep += q.InStep
			return
		}
	}
	l.list = append(l.list, q)
}

// merged is the products of several logs (nil ones skipped), grouped by
// shape in the order first made.
func merged(logs []*productLog) []Product {
	all := &productLog{}
	for _, l := range logs {
		if l == nil {
			continue
		}
		for _, q := range l.list {
			all.add(q)
		}
	}
	return all.list
}

// sgemm is the worker's product, logged while a log is attached.
func (w *worker) sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if w.log != nil {
		t0 := w.log.start()
		w.gemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		w.log.done(Product{TransA: tA == gblas.Trans, TransB: tB == gblas.Trans, M: m, N: n, K: k, LDA: lda, LDB: ldb, LDC: ldc, Beta: beta, Count: 1}, t0)
		return
	}
	w.gemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmPacked is the worker's product with a prepacked right operand
// (op(A) not transposed), logged while a log is attached.
func (w *worker) sgemmPacked(m int, a []float32, lda int, b *blas.PackedB32, beta float32, c []float32, ldc int) {
	if w.log != nil {
		k, n := b.Dims()
		t0 := w.log.start()
		w.gemm.SgemmPacked(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
		w.log.done(Product{PackedB: true, M: m, N: n, K: k, LDA: lda, LDB: n, LDC: ldc, Beta: beta, Count: 1}, t0)
		return
	}
	w.gemm.SgemmPacked(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
}

// sgemmPackedOverlap is sgemmPacked for an A of overlapping rows, lda
// apart.
func (w *worker) sgemmPackedOverlap(m int, a []float32, lda int, b *blas.PackedB32, beta float32, c []float32, ldc int) {
	if w.log != nil {
		k, n := b.Dims()
		t0 := w.log.start()
		w.gemm.SgemmPackedOverlapA(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
		w.log.done(Product{PackedB: true, M: m, N: n, K: k, LDA: lda, LDB: n, LDC: ldc, Beta: beta, Count: 1}, t0)
		return
	}
	w.gemm.SgemmPackedOverlapA(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
}

// sgemmPackedRows is sgemmPackedOverlap computing only the rows i with
// i mod period < keep (the others are left or set to their product),
// logged while a log is attached.
func (w *worker) sgemmPackedRows(m, period, keep int, a []float32, lda int, b *blas.PackedB32, beta float32, c []float32, ldc int) {
	if w.log != nil {
		k, n := b.Dims()
		t0 := w.log.start()
		w.gemm.SgemmPackedRows(m, period, keep, a, lda, b, beta, c, ldc)
		w.log.done(Product{PackedB: true, M: m, N: n, K: k, LDA: lda, LDB: n, LDC: ldc, Beta: beta, Count: 1, MPeriod: period, MKeep: keep}, t0)
		return
	}
	w.gemm.SgemmPackedRows(m, period, keep, a, lda, b, beta, c, ldc)
}

// sgemmPackedOverlapT is sgemmPackedOverlap with op(A) = Aᵀ: A's stored
// rows (op(A)'s columns) lda apart.
func (w *worker) sgemmPackedOverlapT(m int, a []float32, lda int, b *blas.PackedB32, beta float32, c []float32, ldc int) {
	if w.log != nil {
		k, n := b.Dims()
		period, keep := b.Runs()
		t0 := w.log.start()
		w.gemm.SgemmPackedOverlapA(gblas.Trans, m, a, lda, b, beta, c, ldc)
		w.log.done(Product{TransA: true, PackedB: true, M: m, N: n, K: k, LDA: lda, LDB: n, LDC: ldc, Beta: beta, Count: 1, KPeriod: period, KKeep: keep}, t0)
		return
	}
	w.gemm.SgemmPackedOverlapA(gblas.Trans, m, a, lda, b, beta, c, ldc)
}

// RecordProducts starts logging the matrix products the plan's steps
// make (every worker's, grouped by shape), or with on false stops and
// forgets them: what a step's products alone cost, at their real shapes
// and layouts, is the bound a step's time is measured against
// (TimeProducts).
func (p *Plan) RecordProducts(on bool) {
	for _, w := range p.workers {
		w.log = nil
		if on {
			w.log = &productLog{}
		}
	}
}

// Products returns the products logged since RecordProducts(true), in
// the order first made.
func (p *Plan) Products() []Product {
	logs := make([]*productLog, len(p.workers))
	for k, w := range p.workers {
		logs[k] = w.log
	}
	return merged(logs)
}

// Workers is the number of goroutines a step runs on.
func (p *Plan) Workers() int { return len(p.workers) }

// TimeProducts times each product alone on the calling goroutine and
// returns the sum over the list of Count times its time: what one core
// needs for the products alone. Each product runs on operands of its
// shape and layout taken from a worker's buffers (so that timing adds no
// memory to the process; the values a step left there, overwritten with
// values in [-1, 1) where a buffer held none or values so small that
// products would be subnormal; never the implicit convolutions'
// zero-bordered maps, whose borders no step rewrites, nor the buffers
// of the worker's cold arena, which take no memory until written),
// warmed once, then repeated for at least minTime, and the fastest run
// is kept. A run's time is the thread's CPU
// time where the system keeps one (Linux), so that other jobs sharing
// the cores do not count, else wall time.
func (p *Plan) TimeProducts(list []Product, minTime time.Duration) (time.Duration, error) {
	w := p.workers[0]
	var bufs [][]float32
	for _, set := range [][][]float32{w.act, w.d, w.u, w.xh, w.pre, {w.du, w.ex, w.tmp, w.acc, w.wide}} {
		for _, b := range set {
			if len(b) > 0 && !w.cold.holds(b) {
				bufs = append(bufs, b)
			}
		}
	}
	return timeProducts(list, minTime, bufs)
}

// timeProducts is TimeProducts on operands taken from bufs (reordered).
func timeProducts(list []Product, minTime time.Duration, bufs [][]float32) (time.Duration, error) {
	runtime.LockOSThread() // the thread's CPU clock times the products
	defer runtime.UnlockOSThread()
	var g blas.Serial32
	var g64 blas.Serial64
	var packed blas.PackedB32
	slices.SortFunc(bufs, func(a, b []float32) int { return len(a) - len(b) })
	rng := rand.New(rand.NewPCG(7, 11))
	// take returns the smallest unused buffer of at least n floats.
	take := func(n int, used []int) ([]float32, []int) {
		for k, b := range bufs {
			if len(b) >= n && !slices.Contains(used, k) {
				return b[:n], append(used, k)
			}
		}
		v := make([]float32, n)
		for k := range v {
			v[k] = float32(2*rng.Float64() - 1)
		}
		return v, used
	}
	total := time.Duration(0)
	for _, q := range list {
		if q.M <= 0 || q.N <= 0 || q.K <= 0 || q.Count < 0 {
			return 0, dpcore.Invalid("nn", "time products: %+v", q)
		}
		ra, ca := q.M, q.K
		if q.TransA {
			ra, ca = q.K, q.M
		}
		rb, cb := q.K, q.N
		if q.TransB {
			rb, cb = q.N, q.K
		}
		if q.LDA < 1 || q.LDB < cb || q.LDC < q.N { // A's rows may overlap
			return 0, dpcore.Invalid("nn", "time products: leading dimensions of %+v", q)
		}
		a, used := take((ra-1)*q.LDA+ca, nil)
		b, used := take((rb-1)*q.LDB+cb, used)
		c, _ := take((q.M-1)*q.LDC+q.N, used)
		for _, v := range [][]float32{a, b, c} {
			if !allFinite(v) || hasTiny(v) {
				for k := range v {
					v[k] = float32(2*rng.Float64() - 1)
				}
			}
		}
		tA, tB := gblas.NoTrans, gblas.NoTrans
		if q.TransA {
			tA = gblas.Trans
		}
		if q.TransB {
			tB = gblas.Trans
		}
		run := func() {
			g.SgemmOverlapA(tA, tB, q.M, q.N, q.K, 1, a, q.LDA, b, q.LDB, q.Beta, c, q.LDC)
		}
		switch {
		case q.Float64:
			a64, b64, c64 := widen(a), widen(b), widen(c)
			run = func() {
				g64.Dgemm(tA, tB, q.M, q.N, q.K, 1, a64, q.LDA, b64, q.LDB, float64(q.Beta), c64, q.LDC)
			}
		case q.InPlace:
			fi, fo, f := q.K, q.N, denseFwd4
			if q.TransB {
				fi, fo, f = q.N, q.K, denseBwd4
			}
			if !hasDenseKernels() || q.TransA || q.Beta != 0 || q.LDA != q.K || q.LDB != fo || q.LDC != q.N || fi%16 != 0 || fo%64 != 0 {
				return 0, dpcore.Invalid("nn", "time products: in place %+v", q)
			}
			pa, pc := make([]float32, 4*q.K), make([]float32, 4*q.N)
			run = func() {
				fours(q.M, q.K, q.N, a, c, pa, pc, func(A, C []float32) { f(fi, fo, b, A, C) })
			}
		case q.PackedB && q.MPeriod > 0:
			if q.TransA || q.TransB || q.KPeriod > 0 || q.MKeep < 1 || q.MKeep > q.MPeriod || (q.Beta != 0 && q.Beta != 1) {
				return 0, dpcore.Invalid("nn", "time products: rows of %+v", q)
			}
			blas.PackB32(tB, q.K, q.N, 1, b, q.LDB, &packed)
			run = func() {
				g.SgemmPackedRows(q.M, q.MPeriod, q.MKeep, a, q.LDA, &packed, q.Beta, c, q.LDC)
			}
		case q.PackedB && q.KPeriod > 0:
			if q.TransB || q.KKeep < 1 || q.KKeep > q.KPeriod {
				return 0, dpcore.Invalid("nn", "time products: runs of %+v", q)
			}
			blas.PackB32Runs(q.K, q.N, q.KPeriod, q.KKeep, 1, b, q.LDB, &packed)
			run = func() {
				g.SgemmPackedOverlapA(tA, q.M, a, q.LDA, &packed, q.Beta, c, q.LDC)
			}
		case q.PackedB:
			blas.PackB32(tB, q.K, q.N, 1, b, q.LDB, &packed)
			run = func() {
				g.SgemmPackedOverlapA(tA, q.M, a, q.LDA, &packed, q.Beta, c, q.LDC)
			}
		}
		run()
		var runs []time.Duration
		for start := time.Now(); len(runs) < 3 || time.Since(start) < minTime; {
			t0 := time.Now()
			c0, cpu := rusage.ThreadCPU()
			run()
			d := time.Since(t0)
			if c1, ok := rusage.ThreadCPU(); ok && cpu {
				d = c1 - c0
			}
			runs = append(runs, d)
		}
		total += time.Duration(q.Count) * slices.Min(runs)
	}
	return total, nil
}

// widen is v in float64.
func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	widenTo(out, v)
	return out
}

// hasTiny reports whether v holds a nonzero entry below 2^-60 in
// magnitude: products of such operands can be subnormal, which the
// processor computes tens of times slower than the step's own values.
func hasTiny(v []float32) bool {
	for _, x := range v {
		if x != 0 && math.Abs(float64(x)) < 0x1p-60 {
			return true
		}
	}
	return false
}

// Bound is the products of list each timed alone by timeOf (a plan's
// TimeProducts, at least 20 ms a product) and summed: one core's time
// for the products alone. With logf not nil it also logs each product's
// time alone and in the step (InStep), and both totals.
func Bound(list []Product, timeOf func([]Product, time.Duration) (time.Duration, error), logf func(format string, args ...any)) (time.Duration, error) {
	total, inStep := time.Duration(0), time.Duration(0)
	for _, q := range list {
		t, err := timeOf([]Product{q}, 20*time.Millisecond)
		if err != nil {
			return 0, err
		}
		total += t
		inStep += q.InStep
		if logf != nil {
			n := time.Duration(max(q.Count, 1))
			per := t / n
			logf("transA=%v transB=%v float64=%v packedB=%v inPlace=%v %dx%dx%d lda %d ldb %d beta %v: %d x %v alone (%.1f GFLOP/s), %v in the step (x%.2f)",
				q.TransA, q.TransB, q.Float64, q.PackedB, q.InPlace, q.M, q.N, q.K, q.LDA, q.LDB, q.Beta, q.Count, per, q.Flops()/per.Seconds()/1e9,
				q.InStep/n, q.InStep.Seconds()/t.Seconds())
		}
	}
	if logf != nil && total > 0 {
		logf("products alone %v, in the step %v (x%.2f), one core's time", total, inStep, inStep.Seconds()/total.Seconds())
	}
	return total, nil
}
