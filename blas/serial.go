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
	s serial[float32]
	// stream is what PrefetchStream has left to prefetch.
	stream []float32
}

// PrefetchStream has the next products of SgemmPackedRows over packed
// operands that prefetch (SetPrefetch) bring p into L2 in their
// kernels' prefetch slots, in order, instead of their operand's next
// micro-panel, until all of p has been prefetched (or PrefetchStream is
// called again; nil stops it). A kernel call prefetches a cache line
// every four steps of k among its multiply-adds, so the stream trickles
// in while the product computes, without the stall a burst of
// prefetches would make: for data read soon after the products and
// otherwise cold (a large weight read once in a while). The products'
// values are the same bits either way.
func (s *Serial32) PrefetchStream(p []float32) { s.stream = p }

// Streaming reports how many elements of the PrefetchStream are left to
// prefetch.
func (s *Serial32) Streaming() int { return len(s.stream) }

// Sgemm is the package-level Sgemm without its goroutines: same arguments,
// semantics and panics. Matrix-vector shapes (m or n = 1) also take the
// packed path, where the package-level Sgemm hands them to gonum, whose
// large products start goroutines of their own.
func (s *Serial32) Sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	s.s.gemm(kernel32(), gonum.Implementation{}.Sgemm, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Serial64 is Serial32 for float64: products on the calling goroutine
// only, with its own packing buffers. Each element of C is summed in the
// same order whatever the number of cores, so callers that share
// independent products out over goroutines get results that do not depend
// on GOMAXPROCS. The zero value is ready to use; a Serial64 is not safe
// for concurrent use.
type Serial64 struct {
	s serial[float64]
}

// Dgemm is the package-level Dgemm without its goroutines: same arguments,
// semantics and panics.
func (s *Serial64) Dgemm(tA, tB gblas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	s.s.gemm(kernel64(), gonum.Implementation{}.Dgemm, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// serial is the packed product on the calling goroutine with a buffer it
// keeps between calls.
type serial[T float32 | float64] struct {
	buf []T
	// runs is the k runs of a block of a product over PackB32Runs.
	runs []int
}

// gemm validates the arguments as gonum does, hands products too small
// for packing to pay to native (gonum's loops, serial at that size) and
// runs the others with kern on the calling goroutine.
func (s *serial[T]) gemm(kern kernel[T], native gemmFunc[T], tA, tB gblas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if !checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	if m*n*k <= smallWork {
		native(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if alpha == 0 || k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	op := gemmOp[T]{kern: kern, aTrans: isTrans(tA), bTrans: isTrans(tB), k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	if need := op.bufLen(0, m, 0, n); len(s.buf) < need {
		s.buf = make([]T, need)
	}
	op.runBuf(s.buf, 0, m, 0, n)
}

// PackedB64 is alpha*op(B), a k×n matrix, packed once in the layout the
// products of Serial64.DgemmPacked read: for a right operand used in many
// products (the same small matrix against many panels), whose packing
// would otherwise be repeated by every call. Its storage is reused by
// later calls of PackB64 on it.
type PackedB64 struct{ p packedB[float64] }

// PackedB32 is PackedB64 for float32, read by Serial32.SgemmPacked: a
// layer's weight packed once per step for all the products of the step.
// It also keeps B itself (not a copy) for the products too small to pack,
// which Sgemm hands to gonum's loops: B must keep its values while the
// packed copy is used.
type PackedB32 struct {
	p     packedB[float32]
	b     []float32
	ldb   int
	tB    gblas.Transpose
	alpha float32
}

// SetPrefetch sets whether the products over b prefetch each next
// micro-panel of b into L2 while computing with the current one (on
// unless turned off; packing b again keeps the setting). It pays when b
// is larger than L2 and comes from memory, as a large layer's weight
// does once a step: the first row tile of each micro-panel then reads
// from L2 instead of from memory. The products' values are the same
// either way, bit for bit.
func (b *PackedB32) SetPrefetch(on bool) { b.p.noPrefetch = !on }

// Dims returns the packed op(B)'s k and n.
func (b *PackedB32) Dims() (k, n int) { return b.p.k, b.p.n }

// Runs returns the period and keep of a PackB32Runs operand (the
// products over it sum the steps p of k with p mod period < keep), or
// 0, 0.
func (b *PackedB32) Runs() (period, keep int) { return b.p.period, b.p.keep }

// RowTile is the rows of the tile SgemmPackedRows computes runs of rows
// in, with b as its right operand: runs of a multiple of it skip the
// rows between; 0 when every row is computed.
func (b *PackedB32) RowTile() int {
	if b.p.kern.rows == nil || b.p.period != 0 {
		return 0
	}
	return b.p.kern.rowsMR
}

// packedB is alpha*op(B) (k×n) packed in runBuf's block order; with
// period > 0 only its rows p with p mod period < keep.
type packedB[T float32 | float64] struct {
	k, n         int
	period, keep int
	kern         kernel[T]
	data         []T
	runs         []int // scratch for pack
	// noPrefetch turns off the kernels' prefetch of the next micro-panel
	// (SetPrefetch); packing leaves it as it is.
	noPrefetch bool
}

// PackB64 packs alpha*op(B), with op(B) k×n (B or Bᵀ as selected by tB,
// row-major with leading dimension ldb), into dst.
func PackB64(tB gblas.Transpose, k, n int, alpha float64, b []float64, ldb int, dst *PackedB64) {
	dst.p.pack(kernel64(), tB, k, n, 0, 0, alpha, b, ldb)
}

// PackB32 packs alpha*op(B), with op(B) k×n (B or Bᵀ as selected by tB,
// row-major with leading dimension ldb), into dst.
func PackB32(tB gblas.Transpose, k, n int, alpha float32, b []float32, ldb int, dst *PackedB32) {
	dst.p.pack(kernel32(), tB, k, n, 0, 0, alpha, b, ldb)
	dst.b, dst.ldb, dst.tB, dst.alpha = b, ldb, tB, alpha
}

// PackB32Runs packs alpha*B (k×n, row-major with leading dimension ldb)
// into dst for products whose sum over k takes only the steps p with
// p mod period < keep (runs of keep steps, period apart): only those
// rows of B are read and packed, and the products (SgemmPacked,
// SgemmPackedOverlapA) skip the other columns of op(A). Where B's
// skipped rows are zero and op(A) is finite in the skipped columns, such
// a product is, bit for bit, the product over the whole of B: each
// skipped step would have added a zero to a sum that starts at +0 (and
// so is never -0). This is the weight gradient of an implicit
// convolution without its garbage columns. It panics if period < 1 or
// keep is not in [1, period].
func PackB32Runs(k, n, period, keep int, alpha float32, b []float32, ldb int, dst *PackedB32) {
	if period < 1 || keep < 1 || keep > period {
		panic(badRuns)
	}
	dst.p.pack(kernel32(), gblas.NoTrans, k, n, period, keep, alpha, b, ldb)
	dst.b, dst.ldb, dst.tB, dst.alpha = b, ldb, gblas.NoTrans, alpha
}

const badRuns = "blas: bad runs of k"

func (dst *packedB[T]) pack(kern kernel[T], tB gblas.Transpose, k, n, period, keep int, alpha T, b []T, ldb int) {
	dst.k, dst.n, dst.kern, dst.data = k, n, kern, dst.data[:0]
	dst.period, dst.keep = period, keep
	if !checkGemm(gblas.NoTrans, tB, 1, n, k, k, max(1, k), len(b), ldb, n, max(1, n)) || k == 0 {
		return
	}
	nr := kern.nr
	kcMax := min(kern.kc, k)
	ncMax := min(roundUp(kern.nc, nr), roundUp(n, nr))
	// steps is the packed rows of the block of k at pc.
	steps := func(pc int) int {
		kc := min(kcMax, k-pc)
		if period == 0 {
			return kc
		}
		dst.runs = kRuns(dst.runs[:0], pc, kc, period, keep)
		return runLen(dst.runs)
	}
	size := packedSize(nr, kcMax, ncMax, n, k, steps)
	if cap(dst.data) < size {
		dst.data = make([]T, size)
	}
	dst.data = dst.data[:size]
	off := 0
	for jc := 0; jc < n; jc += ncMax {
		nc := min(ncMax, n-jc)
		for pc := 0; pc < k; pc += kcMax {
			kp := steps(pc)
			if period == 0 {
				packB(dst.data[off:], b, ldb, isTrans(tB), pc, jc, kp, nc, nr, alpha)
			} else {
				packBRuns(dst.data[off:], b, ldb, isTrans(tB), pc, jc, dst.runs, kp, nc, nr, alpha)
			}
			off += roundUp(nc, nr) * kp
		}
	}
}

// packedSize is the length of a packed k×n operand in blocks of kcMax
// steps and ncMax columns (rounded up to nr), steps(pc) of them packed in
// the block of k at pc.
func packedSize(nr, kcMax, ncMax, n, k int, steps func(pc int) int) int {
	size := 0
	for jc := 0; jc < n; jc += ncMax {
		for pc := 0; pc < k; pc += kcMax {
			size += roundUp(min(ncMax, n-jc), nr) * steps(pc)
		}
	}
	return size
}

// PackedLen32 is the floats a PackedB32 stores for a k×n op(B) packed by
// PackB32 (period 0) or PackB32Runs (period, keep): the length of the
// storage SetStorage needs for it. It panics as PackB32Runs does on bad
// runs.
func PackedLen32(k, n, period, keep int) int {
	if period != 0 && (period < 1 || keep < 1 || keep > period) {
		panic(badRuns)
	}
	if k <= 0 || n <= 0 {
		return 0
	}
	kern := kernel32()
	kcMax := min(kern.kc, k)
	ncMax := min(roundUp(kern.nc, kern.nr), roundUp(n, kern.nr))
	var runs []int
	return packedSize(kern.nr, kcMax, ncMax, n, k, func(pc int) int {
		kc := min(kcMax, k-pc)
		if period == 0 {
			return kc
		}
		runs = kRuns(runs[:0], pc, kc, period, keep)
		return runLen(runs)
	})
}

// SetStorage has b's later packs store the packed operand at the start
// of buf (which must not be used otherwise while b is) whenever buf is
// long enough for it (PackedLen32), instead of in storage they allocate:
// for callers that place their operands in memory of their own (on huge
// pages, say). Packing into it gives the same values.
func (b *PackedB32) SetStorage(buf []float32) { b.p.data = buf[:0] }

// Len is the floats b's packed operand takes (0 before it is packed).
func (b *PackedB32) Len() int { return len(b.p.data) }

// DgemmPacked computes C = op(A) * P + beta * C for the packed P =
// alpha*op(B) (k×n), op(A) m×k and C m×n, on the calling goroutine, with
// the same summation order as Dgemm.
func (s *Serial64) DgemmPacked(tA gblas.Transpose, m int, a []float64, lda int, b *PackedB64, beta float64, c []float64, ldc int) {
	s.s.gemmPacked(tA, m, a, lda, &b.p, beta, c, ldc)
}

// SgemmPacked computes C = op(A) * P + beta * C for the packed P =
// alpha*op(B) (k×n), op(A) m×k and C m×n, on the calling goroutine: the
// same values as Serial32.Sgemm on B, bit for bit, skipping the packing
// of B (products of m*n*k up to 512, which Sgemm does not pack, read B
// itself as Sgemm does).
func (s *Serial32) SgemmPacked(tA gblas.Transpose, m int, a []float32, lda int, b *PackedB32, beta float32, c []float32, ldc int) {
	if n, k := b.p.n, b.p.k; m*n*k <= smallWork && b.p.period == 0 {
		s.Sgemm(tA, b.tB, m, n, k, b.alpha, a, lda, b.b, b.ldb, beta, c, ldc)
		return
	}
	s.s.gemmPacked(tA, m, a, lda, &b.p, beta, c, ldc)
}

func (s *serial[T]) gemmPacked(tA gblas.Transpose, m int, a []T, lda int, b *packedB[T], beta T, c []T, ldc int) {
	n, k := b.n, b.k
	if !checkGemm(tA, gblas.NoTrans, m, n, k, len(a), lda, k*n, max(1, n), len(c), ldc) {
		return
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	s.runPacked(gemmOp[T]{kern: b.kern, aTrans: isTrans(tA), k: k, alpha: 1, a: a, lda: lda, beta: beta, c: c, ldc: ldc}, b, m, n)
}

// runPacked runs op over the packed b (m×n, m, n, k > 0) with s's
// buffers.
func (s *serial[T]) runPacked(op gemmOp[T], b *packedB[T], m, n int) {
	op.packed, op.period, op.keep, op.noPrefetch = b.data, b.period, b.keep, b.noPrefetch
	if b.period > 0 && b.kern.runs == nil {
		panic(badRuns) // (float64 kernels have no run kernel)
	}
	if need := op.bufLen(0, m, 0, n); len(s.buf) < need {
		s.buf = make([]T, need)
	}
	if need := 2 * (min(op.kern.kc, op.k) + 1); b.period > 0 && cap(s.runs) < need {
		s.runs = make([]int, 0, need)
	}
	op.runs = s.runs[:0]
	op.runBuf(s.buf, 0, m, 0, n)
}

// SgemmOverlapA is Sgemm on the calling goroutine for an A whose rows may
// overlap: row i of A (op(A)'s row i, or its column i when tA is Trans)
// starts at a[i*lda] and lda may be smaller than the row's length, down
// to 1. This is the implicit im2col of a stride-1 convolution: the rows of
// its unfolded input for one kernel row are windows of the (padded)
// input itself, C floats apart. C must not overlap A or B, and its rows
// must not overlap each other (ldc >= n). Every product takes the packed
// path, with Sgemm's summation order.
func (s *Serial32) SgemmOverlapA(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !checkOverlapA(tA, m, k, len(a), lda) || !checkGemm(gblas.NoTrans, tB, m, n, k, m*max(k, 1), max(1, k), len(b), ldb, len(c), ldc) {
		return
	}
	if alpha == 0 || k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	op := gemmOp[float32]{kern: kernel32(), aTrans: isTrans(tA), bTrans: isTrans(tB), k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	if need := op.bufLen(0, m, 0, n); len(s.s.buf) < need {
		s.s.buf = make([]float32, need)
	}
	op.runBuf(s.s.buf, 0, m, 0, n)
}

// SgemmPackedOverlapA is SgemmPacked for an A whose rows may overlap (as
// SgemmOverlapA).
func (s *Serial32) SgemmPackedOverlapA(tA gblas.Transpose, m int, a []float32, lda int, b *PackedB32, beta float32, c []float32, ldc int) {
	n, k := b.p.n, b.p.k
	if !checkOverlapA(tA, m, k, len(a), lda) || !checkGemm(gblas.NoTrans, gblas.NoTrans, m, n, k, m*max(k, 1), max(1, k), k*n, max(1, n), len(c), ldc) {
		return
	}
	if k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	s.s.runPacked(gemmOp[float32]{kern: b.p.kern, aTrans: isTrans(tA), k: k, alpha: 1, a: a, lda: lda, beta: beta, c: c, ldc: ldc}, &b.p, m, n)
}

// checkOverlapA checks an A of m×k (op(A)) whose rows start lda apart
// and may overlap, panicking as gonum does on a bad leading dimension or
// a short slice, and reports whether A has any element.
func checkOverlapA(tA gblas.Transpose, m, k, la, lda int) bool {
	checkShape(tA, gblas.NoTrans, m, 0, k)
	if lda < 1 {
		panic(badLdA)
	}
	rows, cols := m, k
	if isTrans(tA) {
		// Stored rows are op(A)'s columns: k of them, m long, lda apart.
		rows, cols = k, m
	}
	if rows == 0 || cols == 0 {
		return true
	}
	if la < (rows-1)*lda+cols {
		panic(shortA)
	}
	return true
}

// SgemmPackedRows is SgemmPackedOverlapA (op(A) = A) computing only the
// rows i of C with i mod period < keep: runs of keep rows, period apart
// (an implicit convolution's wide output, whose period - keep garbage
// rows a map row are dropped). Each computed row has the bits
// SgemmPackedOverlapA gives it; the other rows of C are either left as
// they were or set to their product's value. beta must be 0 or 1. Where
// the kernel has a tile of rows that divides keep (8 rows on AVX-512,
// the portable kernel's 4) the runs are computed in whole tiles, and the
// rows between are skipped; otherwise, and for a B packed by
// PackB32Runs, every row is computed. It panics as SgemmPackedOverlapA
// does, and if period < 1, keep is not in [1, period] or beta is not 0
// or 1.
func (s *Serial32) SgemmPackedRows(m, period, keep int, a []float32, lda int, b *PackedB32, beta float32, c []float32, ldc int) {
	if period < 1 || keep < 1 || keep > period || (beta != 0 && beta != 1) {
		panic(badRuns)
	}
	kern := b.p.kern
	n, k := b.p.n, b.p.k
	if kern.rows == nil || keep%kern.rowsMR != 0 || b.p.period != 0 || k == 0 {
		s.SgemmPackedOverlapA(gblas.NoTrans, m, a, lda, b, beta, c, ldc)
		return
	}
	if !checkOverlapA(gblas.NoTrans, m, k, len(a), lda) || !checkGemm(gblas.NoTrans, gblas.NoTrans, m, n, k, m*k, k, k*n, max(1, n), len(c), ldc) {
		return
	}
	mr, nr := kern.rowsMR, kern.nr
	if len(s.s.buf) < mr*nr {
		s.s.buf = make([]float32, mr*nr)
	}
	tile := s.s.buf[:mr*nr]
	kcMax := min(kern.kc, k)
	ncMax := min(roundUp(kern.nc, nr), roundUp(n, nr))
	// The whole tiles end at full; a run that m cuts short ends with
	// rows that the ordinary product computes.
	full := m / period * period
	if m-full >= keep {
		full = m
	} else {
		full += (m - full) / mr * mr
	}
	// The kernel's prefetch of the next micro-panel of B, a share of it
	// for each of the tiles (SetPrefetch).
	pf := !b.p.noPrefetch && kern.rowsPF != nil
	tiles := 0
	for r0 := 0; r0 < full; r0 += period {
		tiles += (min(r0+keep, full) - r0 + mr - 1) / mr
	}
	boff := 0
	for jc := 0; jc < n; jc += ncMax {
		nc := min(ncMax, n-jc)
		for pc := 0; pc < k; pc += kcMax {
			kc := min(kcMax, k-pc)
			bp := b.p.data[boff : boff+roundUp(nc, nr)*kc]
			boff += len(bp)
			overwrite := beta == 0 && pc == 0
			for jr := 0; jr < nc; jr += nr {
				cols := min(nr, nc-jr)
				next, per := boff-len(bp)+(jr+nr)*kc, roundUp((nr*kc+tiles-1)/max(tiles, 1), lineElems[float32]())
				t := 0
				for r0 := 0; r0 < full; r0 += period {
					for ir := r0; ir < min(r0+keep, full); ir += mr {
						off := ir*ldc + jc + jr
						if cols == nr && pf {
							pfp := &bp[jr*kc]
							if q := next + t*per; q < len(b.p.data) {
								pfp = &b.p.data[q]
							}
							t++
							if len(s.stream) > 0 {
								// The kernel's kc/4 lines from the stream.
								pfp = &s.stream[0]
								s.stream = s.stream[min(len(s.stream), kc/4*lineElems[float32]()):]
							}
							kern.rowsPF(kc, &a[ir*lda+pc], lda, 1, &bp[jr*kc], &c[off], ldc, overwrite, pfp)
							continue
						}
						if cols == nr {
							kern.rows(kc, &a[ir*lda+pc], lda, 1, &bp[jr*kc], &c[off], ldc, overwrite)
							continue
						}
						kern.rows(kc, &a[ir*lda+pc], lda, 1, &bp[jr*kc], &tile[0], nr, true)
						addTile(c[off:], ldc, tile, nr, mr, cols, overwrite)
					}
				}
			}
		}
	}
	if full < m {
		op := gemmOp[float32]{kern: kern, k: k, alpha: 1, a: a, lda: lda, beta: beta, c: c, ldc: ldc, packed: b.p.data}
		if need := op.bufLen(full, m, 0, n); len(s.s.buf) < need {
			s.s.buf = make([]float32, need)
		}
		op.runBuf(s.s.buf, full, m, 0, n)
	}
}
