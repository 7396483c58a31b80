package blas

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Panic messages, worded as gonum's so that callers see the same failures
// whichever implementation is installed.
const (
	badTranspose = "blas: illegal transpose"
	mLT0         = "blas: m < 0"
	nLT0         = "blas: n < 0"
	kLT0         = "blas: k < 0"
	badLdA       = "blas: bad leading dimension of A"
	badLdB       = "blas: bad leading dimension of B"
	badLdC       = "blas: bad leading dimension of C"
	shortA       = "blas: insufficient length of a"
	shortB       = "blas: insufficient length of b"
	shortC       = "blas: insufficient length of c"
)

const (
	// smallWork is the m*n*k up to which gonum's native loops are used:
	// below it the fixed cost of a packed product (buffers, edge tiles)
	// outweighs the kernel. Measured (float64, one thread): 8³ gonum 3.7
	// against 3.3 GFLOP/s packed; 12³ 2.9 against 6.4; 16³ 3.1 against 8.7.
	smallWork = 8 * 8 * 8
	// parallelWork is the m*n*k above which the product is split across
	// goroutines; below it the goroutine start-up and the duplicated
	// packing outweigh the second core.
	parallelWork = 64 * 64 * 64
)

// Sgemm computes
//
//	C = alpha * op(A) * op(B) + beta * C
//
// where op(X) is X or Xᵀ as selected by tA and tB, op(A) is m×k, op(B) is
// k×n and C is m×n, all stored row-major with leading dimensions lda, ldb
// and ldc. The semantics, including panics on invalid arguments, are those
// of gonum's Implementation.Sgemm: when beta is zero C is overwritten (NaN
// in C does not propagate) and when alpha is zero A and B are not read.
func Sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	if useNative(m, n, k) {
		gonum.Implementation{}.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemm(kernel32(), runtime.GOMAXPROCS(0), isTrans(tA), isTrans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm computes
//
//	C = alpha * op(A) * op(B) + beta * C
//
// where op(X) is X or Xᵀ as selected by tA and tB, op(A) is m×k, op(B) is
// k×n and C is m×n, all stored row-major with leading dimensions lda, ldb
// and ldc. The semantics, including panics on invalid arguments, are those
// of gonum's Implementation.Dgemm: when beta is zero C is overwritten (NaN
// in C does not propagate) and when alpha is zero A and B are not read.
func Dgemm(tA, tB gblas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if !checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	if useNative(m, n, k) {
		gonum.Implementation{}.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemm(kernel64(), runtime.GOMAXPROCS(0), isTrans(tA), isTrans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// useNative reports whether a product is too small, or too close to a
// matrix-vector product, for packing to pay.
func useNative(m, n, k int) bool {
	return m == 1 || n == 1 || m*n*k <= smallWork
}

func isTrans(t gblas.Transpose) bool {
	return t == gblas.Trans || t == gblas.ConjTrans
}

// checkGemm validates the arguments as gonum does and reports whether
// there is any work to do.
func checkGemm(tA, tB gblas.Transpose, m, n, k, la, lda, lb, ldb, lc, ldc int) bool {
	checkShape(tA, tB, m, n, k)
	aTrans, bTrans := isTrans(tA), isTrans(tB)
	if aTrans {
		if lda < max(1, m) {
			panic(badLdA)
		}
	} else if lda < max(1, k) {
		panic(badLdA)
	}
	if bTrans {
		if ldb < max(1, k) {
			panic(badLdB)
		}
	} else if ldb < max(1, n) {
		panic(badLdB)
	}
	if ldc < max(1, n) {
		panic(badLdC)
	}
	if m == 0 || n == 0 {
		return false
	}
	if aTrans {
		if la < (k-1)*lda+m {
			panic(shortA)
		}
	} else if la < (m-1)*lda+k {
		panic(shortA)
	}
	if bTrans {
		if lb < (n-1)*ldb+k {
			panic(shortB)
		}
	} else if lb < (k-1)*ldb+n {
		panic(shortB)
	}
	if lc < (m-1)*ldc+n {
		panic(shortC)
	}
	return true
}

// checkShape panics as gonum does on a bad transposition or a negative
// dimension.
func checkShape(tA, tB gblas.Transpose, m, n, k int) {
	for _, t := range []gblas.Transpose{tA, tB} {
		switch t {
		case gblas.NoTrans, gblas.Trans, gblas.ConjTrans:
		default:
			panic(badTranspose)
		}
	}
	if m < 0 {
		panic(mLT0)
	}
	if n < 0 {
		panic(nLT0)
	}
	if k < 0 {
		panic(kLT0)
	}
}

// kernel describes a micro-kernel and the cache blocking tuned for it.
//
// fn adds the product of a packed MR×kc block of A (column-major
// micro-panel: element (i,p) at a[p*mr+i]) and a packed kc×NR block of B
// (row-major micro-panel: element (p,j) at b[p*nr+j]) to the MR×NR tile
// of C at c with row stride ldc, or stores the product there when
// overwrite is set. kc is at least 1.
type kernel[T float32 | float64] struct {
	name   string
	mr, nr int
	// kc is the depth of a packed block: a kc×NR micro-panel of B stays in
	// L1 while the MR-row micro-panels of A stream past it.
	kc int
	// mc is the number of rows of A packed at once; the mc×kc block stays
	// in L2 while it is multiplied by every micro-panel of B.
	mc int
	// nc is the number of columns of B packed at once; the kc×nc block is
	// sized for a share of L3.
	nc int
	fn func(kc int, a, b, c *T, ldc int, overwrite bool)
	// strided is fn reading A in place: element (i,p) at a[i*rs+p*cs].
	strided func(kc int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool)
	// runs is strided over the k steps of nruns runs, (start, length)
	// pairs at runs, in turn, into one sum: a product whose k skips the
	// steps between (PackB32Runs). Nil for float64.
	runs func(runs *int, nruns int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool)
	// rows is a strided kernel of rowsMR rows (a divisor of 8) and the
	// same NR, for products over runs of rows (SgemmPackedRows): an
	// implicit convolution's map rows of W = 8, 16, 32 pixels in whole
	// tiles. Nil where no such kernel pays (AVX2, float64).
	rowsMR int
	rows   func(kc int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool)
	// packMin is the number of NR-column micro-panels of B in a block
	// from which a transposed A is packed; a row-major (NoTrans) A is
	// packed only from 4*packMin panels. Packing A (scalar Go code) costs
	// several kernel passes over it, so it pays only when each packed
	// element is reused by many micro-panels and the contiguous panel
	// saves cache and TLB misses. Otherwise the strided kernel reads A in
	// place. Measured single-threaded on Zen 5 (AVX-512, float32): A in
	// place ran at 240 GFLOP/s against 206-220 packed for NoTrans A at
	// n = 192..1024, equal at 2048; for Aᵀ (each k step a new cache line)
	// packing won at n = 1024 (153 against 125).
	packMin int
	// fnPF and stridedPF are fn and strided with a prefetch argument: each
	// pass of their unrolled k loop prefetches a cache line from pf on
	// into L2 (nil where there are none). runBuf points them at the next
	// micro-panel of B, a share for each row tile, so that a B streamed
	// from memory (a weight larger than L2, used once per product) is in
	// L2 before its first row tile reads it.
	fnPF      func(kc int, a, b, c *T, ldc int, overwrite bool, pf *T)
	stridedPF func(kc int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool, pf *T)
	// rowsPF is rows with stridedPF's prefetch argument.
	rowsPF func(kc int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool, pf *T)
	// stridedTA and runsTA are stridedPF and runs for a transposed A
	// (rows adjacent): each step also prefetches the rows of the tile
	// after next, whose lines the hardware's stream prefetch, one stream
	// per step, does not fetch ahead (nil where there are none).
	stridedTA func(kc int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool, pf *T)
	runsTA    func(runs *int, nruns int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool)
	// parallelMin is the m*n*k above which the product is split across
	// goroutines (parallelWork; tests lower it).
	parallelMin int
}

// gemm computes C = alpha*op(A)*op(B) + beta*C with the packed algorithm,
// splitting the larger of m and n over at most procs goroutines. Arguments
// are assumed valid with m, n > 0.
func gemm[T float32 | float64](kern kernel[T], procs int, aTrans, bTrans bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if alpha == 0 || k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	op := gemmOp[T]{kern: kern, aTrans: aTrans, bTrans: bTrans, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	if procs > 1 && m*n*k > kern.parallelMin {
		// Split the larger dimension in whole micro-tiles; the other
		// operand is packed for each piece, which costs O(k*min(m,n))
		// against 2*m*n*k/pieces flops.
		var unit, size int
		if n >= m {
			unit, size = kern.nr, n
		} else {
			unit, size = kern.mr, m
		}
		chunks := (size + unit - 1) / unit
		if chunks < 4*procs && k >= 2*procs*kern.kc {
			// Too few micro-tiles to share out evenly (for example the
			// weight gradient of a convolution, a small C summed over a
			// huge batch dimension): split k instead.
			op.splitK(procs, m, n)
			return
		}
		procs = min(procs, chunks)
		if procs > 1 {
			// Deal the split dimension out in up to 4 pieces per
			// goroutine, taken from a shared counter: when the machine
			// is shared and one goroutine is descheduled, the others take
			// its remaining pieces instead of waiting for it.
			pieces := min(chunks, 4*procs)
			var next atomic.Int64
			work := func() {
				for {
					w := int(next.Add(1)) - 1
					if w >= pieces {
						return
					}
					lo := min(chunks*w/pieces*unit, size)
					hi := min(chunks*(w+1)/pieces*unit, size)
					if n >= m {
						op.run(0, m, lo, hi)
					} else {
						op.run(lo, hi, 0, n)
					}
				}
			}
			var wg sync.WaitGroup
			for range procs - 1 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					work()
				}()
			}
			work()
			wg.Wait()
			return
		}
	}
	op.run(0, m, 0, n)
}

// splitK computes the product with each of procs goroutines summing over
// a contiguous range of k. The first adds its part into C (applying beta);
// the others write theirs into private m×n buffers that are then added to
// C.
func (op *gemmOp[T]) splitK(procs, m, n int) {
	k := op.k
	parts := make([][]T, procs)
	var wg sync.WaitGroup
	for w := range procs {
		k0, k1 := k*w/procs, k*(w+1)/procs
		sub := *op
		sub.k = k1 - k0
		// Offset A and B to start at column/row k0 of op(A)/op(B).
		if op.aTrans {
			sub.a = op.a[k0*op.lda:]
		} else {
			sub.a = op.a[k0:]
		}
		if op.bTrans {
			sub.b = op.b[k0:]
		} else {
			sub.b = op.b[k0*op.ldb:]
		}
		if w > 0 {
			parts[w] = make([]T, m*n)
			sub.c, sub.ldc, sub.beta = parts[w], n, 0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.run(0, m, 0, n)
		}()
	}
	wg.Wait()
	for _, part := range parts[1:] {
		for i := range m {
			dst := op.c[i*op.ldc : i*op.ldc+n]
			for j, v := range part[i*n : i*n+n] {
				dst[j] += v
			}
		}
	}
}

type gemmOp[T float32 | float64] struct {
	kern           kernel[T]
	aTrans, bTrans bool
	k              int
	alpha          T
	a              []T
	lda            int
	b              []T
	ldb            int
	beta           T
	c              []T
	ldc            int
	// packed, when set, is alpha*op(B) already packed for a product
	// over the whole of B (see PackB64); b and alpha are then unused.
	packed []T
	// period and keep, when period > 0, restrict the sum over k to the
	// steps p with p mod period < keep (PackB32Runs; packed is set);
	// runs is scratch for a block's runs of such steps.
	period, keep int
	runs         []int
	// noPrefetch: the kernels do not prefetch the next micro-panel of B
	// (kernel.stridedPF; PackedB32.SetPrefetch) nor, for a transposed A,
	// A's next rows (kernel.stridedTA).
	noPrefetch bool
}

// run computes the block C[i0:i1, j0:j1] with the five loops of the Goto
// algorithm: jc over nc-column blocks of B, pc over kc-deep slices, ic over
// mc-row blocks of A, then jr/ir over NR/MR micro-tiles.
func (op *gemmOp[T]) run(i0, i1, j0, j1 int) {
	bufp := getBuffer[T](op.bufLen(i0, i1, j0, j1))
	defer putBuffer(bufp)
	op.runBuf(*bufp, i0, i1, j0, j1)
}

// bufLen is the packing buffer length run needs for the block.
func (op *gemmOp[T]) bufLen(i0, i1, j0, j1 int) int {
	kern := op.kern
	mr, nr := kern.mr, kern.nr
	kcMax := min(kern.kc, op.k)
	mcMax := min(roundUp(kern.mc, mr), roundUp(i1-i0, mr))
	ncMax := min(roundUp(kern.nc, nr), roundUp(j1-j0, nr))
	return mcMax*kcMax + ncMax*kcMax + mr*nr
}

// runBuf is run with the caller's packing buffer (at least bufLen long).
func (op *gemmOp[T]) runBuf(buf []T, i0, i1, j0, j1 int) {
	kern := op.kern
	mr, nr := kern.mr, kern.nr
	m, n, k := i1-i0, j1-j0, op.k
	kcMax := min(kern.kc, k)
	mcMax := min(roundUp(kern.mc, mr), roundUp(m, mr))
	ncMax := min(roundUp(kern.nc, nr), roundUp(n, nr))
	ap := buf[:mcMax*kcMax]
	bp := buf[mcMax*kcMax : mcMax*kcMax+ncMax*kcMax]
	tile := buf[mcMax*kcMax+ncMax*kcMax:]
	c, ldc := op.c, op.ldc
	// A's in-place strides: op(A)(i,p) = a[i*rs+p*cs].
	rs, cs := op.lda, 1
	if op.aTrans {
		rs, cs = 1, op.lda
	}

	// With beta = 0 the first k block stores instead of accumulating,
	// which both skips a pass over C and overwrites NaN in C.
	zeroBeta := op.beta == 0
	if !zeroBeta {
		scaleC(op.beta, c, ldc, i0, i1, j0, j1)
	}
	boff := 0
	for jc := j0; jc < j1; jc += ncMax {
		nc := min(ncMax, j1-jc)
		for pc := 0; pc < k; pc += kcMax {
			kc := min(kcMax, k-pc)
			overwrite := zeroBeta && pc == 0
			// kp is the block's steps of k: kc, or with runs the steps
			// in them, which are also the packed rows of B.
			kp := kc
			var runs []int
			if op.period > 0 {
				runs = kRuns(op.runs[:0], pc, kc, op.period, op.keep)
				op.runs = runs
				kp = runLen(runs)
			}
			// bsrc[bbase:] is the block's packed B (the next block
			// follows it when prepacked).
			bsrc, bbase := bp, 0
			if op.packed != nil {
				// Prepacked (PackB64): the blocks lie in this loop's order.
				size := roundUp(nc, nr) * kp
				bp = op.packed[boff : boff+size]
				bsrc, bbase = op.packed, boff
				boff += size
			} else {
				packB(bp, op.b, op.ldb, op.bTrans, pc, jc, kc, nc, nr, op.alpha)
			}
			if kp == 0 {
				// No step of k in this block: the sum is zero.
				if overwrite {
					scaleC(0, c, ldc, i0, i1, jc, jc+nc)
				}
				continue
			}
			panels := (nc + nr - 1) / nr
			pack := panels >= kern.packMin && (op.aTrans || panels >= 4*kern.packMin)
			pf := !op.noPrefetch && kern.stridedPF != nil && runs == nil
			stridedPF, runsK := kern.stridedPF, kern.runs
			if op.aTrans && !op.noPrefetch && kern.stridedTA != nil {
				stridedPF, runsK = kern.stridedTA, kern.runsTA
			}
			for ic := i0; ic < i1; ic += mcMax {
				mc := min(mcMax, i1-ic)
				full := mc / mr * mr // rows in whole micro-panels
				switch {
				case pack && runs != nil:
					packARuns(ap, op.a, op.lda, op.aTrans, ic, pc, mc, runs, kp, mr)
				case pack:
					packA(ap, op.a, op.lda, op.aTrans, ic, pc, mc, kc, mr)
				case full < mc && runs != nil:
					packARuns(ap[full*kp:], op.a, op.lda, op.aTrans, ic+full, pc, mc-full, runs, kp, mr)
				case full < mc:
					// The kernel reads MR rows, so a ragged last panel is
					// packed (zero-padded) even when A is read in place.
					packA(ap[full*kc:], op.a, op.lda, op.aTrans, ic+full, pc, mc-full, kc, mr)
				}
				for jr := 0; jr < nc; jr += nr {
					cols := min(nr, nc-jr)
					bPanel := &bp[jr*kp]
					// The next micro-panel in memory (the block's next, or
					// the next block's first), a share of it for each full
					// row tile to prefetch.
					next, per := bbase+(jr+nr)*kp, roundUp((nr*kp+full/mr-1)/max(full/mr, 1), lineElems[T]())
					for ir := 0; ir < mc; ir += mr {
						rows := min(mr, mc-ir)
						off := (ic+ir)*ldc + jc + jr
						if pf && rows == mr && cols == nr {
							pfp := bPanel
							if q := next + ir/mr*per; q < len(bsrc) {
								pfp = &bsrc[q]
							}
							if !pack {
								stridedPF(kc, &op.a[(ic+ir)*rs+pc*cs], rs, cs, bPanel, &c[off], ldc, overwrite, pfp)
							} else {
								kern.fnPF(kp, &ap[ir*kp], bPanel, &c[off], ldc, overwrite, pfp)
							}
							continue
						}
						if !pack && rows == mr && cols == nr {
							if runs != nil {
								runsK(&runs[0], len(runs)/2, &op.a[(ic+ir)*rs+pc*cs], rs, cs, bPanel, &c[off], ldc, overwrite)
								continue
							}
							kern.strided(kc, &op.a[(ic+ir)*rs+pc*cs], rs, cs, bPanel, &c[off], ldc, overwrite)
							continue
						}
						aPanel := &ap[ir*kp]
						if !pack && rows == mr {
							// Unpacked full panel with an edge column block.
							if runs != nil {
								kern.runs(&runs[0], len(runs)/2, &op.a[(ic+ir)*rs+pc*cs], rs, cs, bPanel, &tile[0], nr, true)
							} else {
								kern.strided(kc, &op.a[(ic+ir)*rs+pc*cs], rs, cs, bPanel, &tile[0], nr, true)
							}
							addTile(c[off:], ldc, tile, nr, rows, cols, overwrite)
							continue
						}
						if rows == mr && cols == nr {
							kern.fn(kp, aPanel, bPanel, &c[off], ldc, overwrite)
							continue
						}
						// Edge tile: compute into a full-size scratch tile
						// and add only the part that lies inside C.
						kern.fn(kp, aPanel, bPanel, &tile[0], nr, true)
						addTile(c[off:], ldc, tile, nr, rows, cols, overwrite)
					}
				}
			}
		}
	}
}

// kRuns appends to dst the runs of the steps p in [pc, pc+kc) with p mod
// period < keep, as (start - pc, length) pairs, and returns it.
func kRuns(dst []int, pc, kc, period, keep int) []int {
	for p := pc; p < pc+kc; {
		phase := p % period
		if phase >= keep {
			p += period - phase
			continue
		}
		n := min(keep-phase, pc+kc-p)
		dst = append(dst, p-pc, n)
		p += n
	}
	return dst
}

// runLen is the number of steps in runs.
func runLen(runs []int) int {
	n := 0
	for r := 1; r < len(runs); r += 2 {
		n += runs[r]
	}
	return n
}

// packARuns is packA over the steps of runs (relative to pc) only: the
// panels hold kp = runLen(runs) columns.
func packARuns[T float32 | float64](dst, a []T, lda int, trans bool, ic, pc, mc int, runs []int, kp, mr int) {
	for ir := 0; ir < mc; ir += mr {
		rows := min(mr, mc-ir)
		q := 0
		for r := 0; r < len(runs); r += 2 {
			packA(dst[ir*kp+q*mr:], a, lda, trans, ic+ir, pc+runs[r], rows, runs[r+1], mr)
			q += runs[r+1]
		}
	}
}

// packBRuns is packB over the rows of runs (relative to pc) only: the
// panels hold kp = runLen(runs) rows.
func packBRuns[T float32 | float64](dst, b []T, ldb int, trans bool, pc, jc int, runs []int, kp, nc, nr int, alpha T) {
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		q := 0
		for r := 0; r < len(runs); r += 2 {
			packB(dst[jr*kp+q*nr:], b, ldb, trans, pc+runs[r], jc+jr, runs[r+1], cols, nr, alpha)
			q += runs[r+1]
		}
	}
}

// Packing buffers are recycled through sync.Pool: they are hundreds of
// KiB to MiB, and allocating (and zeroing) them on every call costs as much
// as a small product. The pools are caches with no observable state.
var (
	pool32 sync.Pool
	pool64 sync.Pool
)

func getBuffer[T float32 | float64](n int) *[]T {
	var v any
	switch any(T(0)).(type) {
	case float32:
		v = pool32.Get()
	default:
		v = pool64.Get()
	}
	if p, ok := v.(*[]T); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]T, n)
	return &s
}

func putBuffer[T float32 | float64](p *[]T) {
	switch any(T(0)).(type) {
	case float32:
		pool32.Put(p)
	default:
		pool64.Put(p)
	}
}

// addTile adds (or with overwrite, copies) the rows×cols corner of an
// MR×NR scratch tile into C.
func addTile[T float32 | float64](c []T, ldc int, tile []T, nr, rows, cols int, overwrite bool) {
	for i := range rows {
		dst := c[i*ldc : i*ldc+cols]
		src := tile[i*nr : i*nr+cols]
		if overwrite {
			copy(dst, src)
			continue
		}
		for j, v := range src {
			dst[j] += v
		}
	}
}

// lineElems is the elements of T in a 64-byte cache line.
func lineElems[T float32 | float64]() int {
	var v T
	return 64 / int(unsafe.Sizeof(v))
}

func roundUp(x, unit int) int { return (x + unit - 1) / unit * unit }

// scaleC sets C[i0:i1, j0:j1] to beta*C, writing zeros (not 0*C, which
// keeps NaN) when beta is zero.
func scaleC[T float32 | float64](beta T, c []T, ldc, i0, i1, j0, j1 int) {
	switch beta {
	case 1:
		return
	case 0:
		for i := i0; i < i1; i++ {
			clear(c[i*ldc+j0 : i*ldc+j1])
		}
	default:
		for i := i0; i < i1; i++ {
			row := c[i*ldc+j0 : i*ldc+j1]
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// packA copies op(A)[ic:ic+mc, pc:pc+kc] into dst as mr-row micro-panels,
// each stored column by column, zero-padding the last panel.
func packA[T float32 | float64](dst, a []T, lda int, trans bool, ic, pc, mc, kc, mr int) {
	for ir := 0; ir < mc; ir += mr {
		rows := min(mr, mc-ir)
		panel := dst[ir*kc : ir*kc+mr*kc]
		if trans {
			// op(A)(i,p) = a[p*lda+i]: rows of the panel are contiguous.
			// Element loops rather than copy/clear: panels are a dozen
			// elements wide, too short for memmove to pay for its call.
			for p := range kc {
				src := a[(pc+p)*lda+ic+ir : (pc+p)*lda+ic+ir+rows]
				d := panel[p*mr : p*mr+mr]
				for i, v := range src {
					d[i] = v
				}
				for i := rows; i < mr; i++ {
					d[i] = 0
				}
			}
			continue
		}
		// op(A)(i,p) = a[i*lda+p].
		for i := range rows {
			src := a[(ic+ir+i)*lda+pc : (ic+ir+i)*lda+pc+kc]
			for p, v := range src {
				panel[p*mr+i] = v
			}
		}
		for i := rows; i < mr; i++ {
			for p := range kc {
				panel[p*mr+i] = 0
			}
		}
	}
}

// packB copies alpha*op(B)[pc:pc+kc, jc:jc+nc] into dst as nr-column
// micro-panels, each stored row by row, zero-padding the last panel.
// Folding alpha into B (always packed, unlike A) keeps the kernel a pure
// multiply-add.
func packB[T float32 | float64](dst, b []T, ldb int, trans bool, pc, jc, kc, nc, nr int, alpha T) {
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		panel := dst[jr*kc : jr*kc+nr*kc]
		if trans {
			// op(B)(p,j) = b[j*ldb+p].
			for j := range cols {
				src := b[(jc+jr+j)*ldb+pc : (jc+jr+j)*ldb+pc+kc]
				for p, v := range src {
					panel[p*nr+j] = alpha * v
				}
			}
			if cols < nr {
				for p := range kc {
					clear(panel[p*nr+cols : p*nr+nr])
				}
			}
			continue
		}
		// op(B)(p,j) = b[p*ldb+j]: rows of the panel are contiguous.
		if alpha == 1 && cols == nr && kc > 0 && packRows(panel[:kc*nr], b[pc*ldb+jc+jr:], ldb, kc, nr) {
			continue
		}
		for p := range kc {
			d := panel[p*nr : p*nr+nr]
			src := b[(pc+p)*ldb+jc+jr : (pc+p)*ldb+jc+jr+cols]
			if alpha == 1 {
				copy(d, src)
			} else {
				for j, v := range src {
					d[j] = alpha * v
				}
			}
			clear(d[cols:])
		}
	}
}

// packRows copies rows > 0 rows of nr elements, ldb apart in src, into dst
// one after the other, and reports whether it did: in one copy when they
// are contiguous (ldb = nr), else for float32 with the vector kernels' NR
// a row at a time with vector moves (packRows32), without a call to
// memmove per row.
func packRows[T float32 | float64](dst, src []T, ldb, rows, nr int) bool {
	if ldb == nr {
		copy(dst, src[:rows*nr])
		return true
	}
	d, ok := any(dst).([]float32)
	if !ok {
		return false
	}
	return packRows32(d[:rows*nr], any(src).([]float32)[:(rows-1)*ldb+nr], ldb, rows, nr)
}
