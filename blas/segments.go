package blas

import (
	"unsafe"

	gblas "gonum.org/v1/gonum/blas"
)

// Multi-segment products: C = beta C + sum_s A_s P_s, where every A_s is
// a matrix of overlapping rows at its own offset in one slice (the kernel
// rows of an implicit convolution, windows of one zero-bordered map) and
// P_s its packed right operand. The segments' sum is formed tile by tile:
// each MR×NR tile of C takes every segment's product in turn while it is
// in L1, instead of one pass over the whole of C per segment.

const (
	badSegments = "blas: segment count mismatch"
	badSegmentN = "blas: segments of different widths"
	badSegOff   = "blas: negative segment offset"
)

// SgemmPackedSegments computes
//
//	C = beta C + A_0 P_0 + A_1 P_1 + ... (added in that order)
//
// on the calling goroutine, where P_s = b[s] is a packed k_s×n matrix
// (PackB32; every b[s] of the same n) and A_s the m×k_s matrix whose row i
// is a[offs[s]+i*lda : offs[s]+i*lda+k_s]: rows that may overlap, as in
// SgemmOverlapA. The result is, bit for bit, that of
//
//	SgemmPackedOverlapA(NoTrans, m, a[offs[0]:], lda, &b[0], beta, c, ldc)
//	SgemmPackedOverlapA(NoTrans, m, a[offs[1]:], lda, &b[1], 1, c, ldc)
//	...
//
// (each segment's partial sum is formed from zero and then added to C, as
// those calls do), but each MR×NR tile of C is finished across all the
// segments while it is in L1, so C goes through the cache hierarchy once
// instead of once per segment. C must not overlap A or the packed
// operands, and its rows must not overlap each other (ldc >= n). It
// panics as SgemmPackedOverlapA does on bad arguments, and when offs and b
// differ in length, are empty, or the b[s] differ in n.
func (s *Serial32) SgemmPackedSegments(m int, a []float32, lda int, offs []int, b []PackedB32, beta float32, c []float32, ldc int) {
	if len(offs) != len(b) || len(b) == 0 {
		panic(badSegments)
	}
	n := b[0].p.n
	for k := range b {
		if b[k].p.n != n {
			panic(badSegmentN)
		}
		if offs[k] < 0 {
			panic(badSegOff)
		}
		if offs[k] > len(a) {
			panic(shortA)
		}
		kk := b[k].p.k
		if !checkOverlapA(gblas.NoTrans, m, kk, len(a)-offs[k], lda) || !checkGemm(gblas.NoTrans, gblas.NoTrans, m, n, kk, m*max(kk, 1), max(1, kk), kk*n, max(1, n), len(c), ldc) {
			return // m or n is zero
		}
	}
	segs := s.segs[:0]
	for k := range b {
		segs = append(segs, segment[float32]{a: a[offs[k]:], packed: b[k].p.data, k: b[k].p.k})
	}
	kern := b[0].p.kern
	if need := kern.mr*min(kern.kc, maxK(segs)) + kern.mr*kern.nr; len(s.s.buf) < need {
		s.s.buf = make([]float32, need)
	}
	runSegments(kern, s.s.buf, segs, lda, m, n, beta, c, ldc)
	clear(segs) // keep no reference to the operands
	s.segs = segs[:0]
}

// segment is one term A_s P_s of a multi-segment product: a holds A_s's
// first row at its start, packed is P_s in runBuf's block order.
type segment[T float32 | float64] struct {
	a      []T
	packed []T
	k      int
}

func maxK[T float32 | float64](segs []segment[T]) int {
	k := 1
	for _, s := range segs {
		k = max(k, s.k)
	}
	return k
}

// runSegments computes C = beta C + sum_s A_s P_s (m×n, n > 0, m > 0)
// with buf at least MR*min(kc, max k_s) + MR*NR long. Each tile of C
// takes every segment, and every kc block of a segment, in the order of
// the per-segment products it replaces, with the kernel call those
// products make for it (A read in place, a ragged last row panel packed,
// an edge column block through a scratch tile): the same bits.
func runSegments[T float32 | float64](kern kernel[T], buf []T, segs []segment[T], lda, m, n int, beta T, c []T, ldc int) {
	if segs[0].k == 0 {
		// The first call of the sequence applies beta and adds nothing.
		scaleC(beta, c, ldc, 0, m, 0, n)
		beta = 1
	}
	live := segs[:0] // (the caller's list, filtered in place)
	for _, s := range segs {
		if s.k > 0 {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return
	}
	zeroBeta := beta == 0
	if !zeroBeta {
		scaleC(beta, c, ldc, 0, m, 0, n)
	}
	mr, nr := kern.mr, kern.nr
	ncMax := min(roundUp(kern.nc, nr), roundUp(n, nr))
	kcMax := min(kern.kc, maxK(live))
	ap := buf[:mr*kcMax]
	tile := buf[mr*kcMax : mr*kcMax+mr*nr]
	full := m / mr * mr
	mb := segRows(kern, live, m)
	for jc := 0; jc < n; jc += ncMax {
		nc := min(ncMax, n-jc)
		ncr := roundUp(nc, nr)
		for jr := 0; jr < nc; jr += nr {
			cols := min(nr, nc-jr)
			for ib := 0; ib < m; ib += mb {
				overwrite := zeroBeta
				for _, s := range live {
					// The packed blocks of P_s lie jc-major, then kc
					// blocks of min(kc, k_s) rows: all earlier jc blocks
					// are ncMax wide.
					skc := min(kern.kc, s.k)
					base := jc / ncMax * ncMax * s.k
					for pc := 0; pc < s.k; pc += skc {
						kc := min(skc, s.k-pc)
						bPanel := &s.packed[base+ncr*pc+jr*kc]
						for ir := ib; ir < min(ib+mb, m); ir += mr {
							rows := min(mr, m-ir)
							off := ir*ldc + jc + jr
							switch {
							case rows == mr && cols == nr:
								kern.strided(kc, &s.a[ir*lda+pc], lda, 1, bPanel, &c[off], ldc, overwrite)
							case rows == mr:
								kern.strided(kc, &s.a[ir*lda+pc], lda, 1, bPanel, &tile[0], nr, true)
								addTile(c[off:], ldc, tile, nr, rows, cols, overwrite)
							default:
								packA(ap, s.a, lda, false, full, pc, rows, kc, mr)
								kern.fn(kc, &ap[0], bPanel, &tile[0], nr, true)
								addTile(c[off:], ldc, tile, nr, rows, cols, overwrite)
							}
						}
						overwrite = false
					}
				}
			}
		}
	}
}

// segL1 is the size up to which the B micro-panels of all the segments
// (one NR-column panel, every kc block) are taken to stay in L1 (48 KiB
// on the target cores) beside a tile of C and the rows of A it reads.
var segL1 = 40 << 10

// segRows is the rows of C in runSegments' blocks. When the segments'
// B micro-panels fit in L1 together, a block is one MR-row panel: each
// tile of C takes all the segments while in L1, and B stays there.
// Otherwise every segment's micro-panel goes past all the rows before
// the next (the order of the per-segment products, C through L2): taking
// the segments tile by tile would reread each from L2 for every tile,
// which costs what the passes over C cost.
func segRows[T float32 | float64](kern kernel[T], segs []segment[T], m int) int {
	var z T
	size := 0
	for _, s := range segs {
		size += s.k * kern.nr * int(unsafe.Sizeof(z))
	}
	if size <= segL1 {
		return kern.mr
	}
	return roundUp(m, kern.mr)
}
