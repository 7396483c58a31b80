package nn

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/dpmf-go/dpmf/blas"
	gblas "gonum.org/v1/gonum/blas"
)

// Help at the end of a step's chunks: with two workers, the one through
// its chunks first, instead of waiting for the other (finish), computes
// the lower half of the rows of each large product the other makes until
// it too is through. Each entry of a product is the same chain of
// operations whichever rows a call covers (the kernels sum each entry's
// k in the same order from zero, and the split keeps the row-run
// pattern), so which worker computes a row changes no bit; the chunks
// and what each worker adds into its accumulator stay as they were.

// helpMin is the least m*n*k of a product split with a helper: about
// 8 us of one core, so that the hand-over (a few cache lines between the
// cores) stays small beside each half.
const helpMin = 1 << 19

// helpIdle is how long a helper waits for a product without any before
// it sleeps instead (the other worker is then in a long stretch without
// large products, or descheduled).
const helpIdle = time.Millisecond

// Product kinds a helper computes (helpJob.kind).
const (
	helpPacked = iota
	helpOverlap
	helpOverlapT
	helpRows
)

// helpTest is what tests set of help (Options.helpTest): always splits
// every large product even without a helper (the worker computes both
// halves), wait has a worker that hands a half over wait until the
// helper takes it, refuse has the helper take none; min and idle
// override helpMin and helpIdle.
type helpTest struct {
	always, wait, refuse bool
	min                  int
	idle                 time.Duration
}

// helpJob is the part of a product handed to the helper: the arguments
// of the worker's product method of that kind.
type helpJob struct {
	kind         uint8
	m            int
	period, keep int
	a            []float32
	lda          int
	b            *blas.PackedB32
	beta         float32
	c            []float32
	ldc          int
}

// helpState is the hand-over between the two workers: on while one of
// them is waiting to help; state 0 (no job), 1 (posted), 2 (taken), 3
// (done); helped counts the jobs a helper computed (tests).
type helpState struct {
	on, state, helped atomic.Int32
	job               helpJob
}

// run computes job j with worker w's product methods (unsplit).
func (j *helpJob) run(w *worker) {
	switch j.kind {
	case helpPacked:
		w.gemm.SgemmPacked(gblas.NoTrans, j.m, j.a, j.lda, j.b, j.beta, j.c, j.ldc)
	case helpOverlap:
		w.gemm.SgemmPackedOverlapA(gblas.NoTrans, j.m, j.a, j.lda, j.b, j.beta, j.c, j.ldc)
	case helpOverlapT:
		w.gemm.SgemmPackedOverlapA(gblas.Trans, j.m, j.a, j.lda, j.b, j.beta, j.c, j.ldc)
	case helpRows:
		w.gemm.SgemmPackedRows(j.m, j.period, j.keep, j.a, j.lda, j.b, j.beta, j.c, j.ldc)
	}
}

// split returns the rows of an m-row product over b that worker w keeps
// when another worker is waiting to help (the rest, from a multiple of
// align on, goes to it), or 0 to compute it all.
func (w *worker) split(m, align int, b *blas.PackedB32) int {
	h := w.help
	if h == nil || w.log != nil || (h.on.Load() == 0 && !w.ht.always) {
		return 0
	}
	k, n := b.Dims()
	if m*n*k < w.ht.min {
		return 0
	}
	r := (m + 1) / 2 / align * align
	if r <= 0 || r >= m {
		return 0
	}
	return r
}

// shared computes the rows [0, r) of the product whose rows [r, m) are
// job, handing job to the helper: the caller has computed nothing yet;
// mine computes the caller's rows. If no helper takes the job in time,
// the caller computes it too.
func (w *worker) shared(job helpJob, mine func()) {
	h := w.help
	if h.on.Load() == 0 { // (helpTest.always without a helper)
		mine()
		job.run(w)
		return
	}
	h.job = job
	h.state.Store(1)
	for w.ht.wait && h.state.Load() == 1 {
		runtime.Gosched() // (tests: until the helper takes it)
	}
	mine()
	if h.state.CompareAndSwap(1, 0) {
		h.job.run(w) // not taken
		h.job = helpJob{}
		return
	}
	for h.state.Load() != 3 {
		runtime.Gosched()
	}
	h.job = helpJob{}
	h.state.Store(0)
}

// helpUntil is worker w's help with the other worker's products until
// done reports true or no product has come for idle; it returns whether
// done holds.
func (w *worker) helpUntil(done func() bool, idle time.Duration) bool {
	h := w.help
	h.on.Store(1)
	defer h.on.Store(0)
	last := time.Now()
	for i := 1; ; i++ {
		if done() {
			return true
		}
		if !w.ht.refuse && h.state.Load() == 1 && h.state.CompareAndSwap(1, 2) {
			h.job.run(w)
			h.helped.Add(1)
			h.state.Store(3)
			last = time.Now()
			continue
		}
		if i%64 == 0 && time.Since(last) > idle {
			return false
		}
		runtime.Gosched()
	}
}
