package nn

import "time"

// A large dense layer's weight (CIFAR's 2048x128 head: 1 MiB) is read
// twice a chunk, by the forward product and by the input gradient; packed
// (Plan.permuteShare) those are two different MiB, both out of the
// caches by the time the next chunk reaches the layer (the chunk's
// convolutions stream their maps through them in between). Reading W in
// place for both, four rows of the chunk at a time, the input gradient
// finds in L2 what the forward product has just read (and neither is
// packed per step). The kernels (dense_amd64.s) give every element the
// bits of the packed products: the same chains of FMAs over the same
// blocks of k.

const (
	// denseKC is the depth of the blocks of k that package blas's
	// AVX-512 float32 products sum in turn (its kernel's kc): each
	// block's sum starts from zero and is then added to C.
	denseKC = 256
	// inPlaceWeights is the least weight count of a dense layer read in
	// place (smaller weights stay in cache between chunks).
	inPlaceWeights = 1 << 16
	// inPlaceChunk is the largest chunk for which a dense layer is read
	// in place: the kernels take four rows at a time and reread W for
	// every four.
	inPlaceChunk = 8
)

// inPlace reports whether dense stage s's forward product and input
// gradient read its weight in place (denseForward, denseBackward) rather
// than packed.
func (p *Plan) inPlace(s *stage) bool {
	return s.kind == kDense && !p.opt.noDenseInPlace && hasDenseKernels() &&
		s.fi%16 == 0 && s.fo%64 == 0 && s.fi*s.fo >= inPlaceWeights && p.opt.Chunk <= inPlaceChunk
}

// denseForward writes into c (m x fo) the product a W of a (m x fi) and
// dense stage s's weight W (fi x fo, row-major): the bits of sgemmPacked
// over s.pw.
func (w *worker) denseForward(s *stage, W []float32, m int, a, c []float32) {
	w.byFours(denseProduct(false, m, s.fi, s.fo), a, c, w.dpad, w.dpadC, func(A, C []float32) {
		denseFwd4(s.fi, s.fo, W, A, C)
	})
}

// denseBackward writes into c (m x fi) the product g Wᵀ of g (m x fo)
// and the transpose of dense stage s's weight W (fi x fo, row-major):
// the bits of sgemmPacked over s.pwt.
func (w *worker) denseBackward(s *stage, W []float32, m int, g, c []float32) {
	w.byFours(denseProduct(true, m, s.fi, s.fo), g, c, w.dpadC, w.dpad, func(G, C []float32) {
		denseBwd4(s.fi, s.fo, W, G, C)
	})
}

// denseProduct is the Product a dense layer of weight W (fi x fo) read
// in place makes over m rows: A W (the forward product, B = W) or, with
// back, G Wᵀ (the input gradient, B = W transposed).
func denseProduct(back bool, m, fi, fo int) Product {
	if back {
		return Product{InPlace: true, TransB: true, M: m, N: fi, K: fo, LDA: fo, LDB: fo, LDC: fi, Count: 1}
	}
	return Product{InPlace: true, M: m, N: fo, K: fi, LDA: fi, LDB: fo, LDC: fo, Count: 1}
}

// denseFwd4 writes into C (4 x fo) the product A W of A (4 x fi) and W
// (fi x fo).
func denseFwd4(fi, fo int, W, A, C []float32) {
	_, _, _ = A[4*fi-1], C[4*fo-1], W[fi*fo-1]
	for q0 := 0; q0 < fi; q0 += denseKC {
		k := min(denseKC, fi-q0)
		for o0 := 0; o0 < fo; o0 += 64 {
			denseFwd4x64(k, &A[q0], fi, &W[q0*fo+o0], fo, &C[o0], fo, q0 == 0)
		}
	}
}

// denseBwd4 writes into C (4 x fi) the product G Wᵀ of G (4 x fo) and W
// (fi x fo).
func denseBwd4(fi, fo int, W, G, C []float32) {
	_, _, _ = G[4*fo-1], C[4*fi-1], W[fi*fo-1]
	for q0 := 0; q0 < fi; q0 += 16 {
		for o0 := 0; o0 < fo; o0 += denseKC {
			denseBwd4x16(min(denseKC, fo-o0), &G[o0], fo, &W[q0*fo+o0], fo, &C[q0], fi, o0 == 0)
		}
	}
}

// byFours runs f on the rows of a (q.M x q.K) four at a time, writing
// the rows of c (q.M x q.N): a last group of fewer rows through the
// padded copies pa and pc (the missing rows zero). It logs the product
// q while a log is attached.
func (w *worker) byFours(q Product, a, c, pa, pc []float32, f func(A, C []float32)) {
	var t0 time.Duration
	if w.log != nil {
		t0 = w.log.start()
	}
	fours(q.M, q.K, q.N, a, c, pa, pc, f)
	if w.log != nil {
		w.log.done(q, t0)
	}
}

// fours is byFours without the log.
func fours(m, k, n int, a, c, pa, pc []float32, f func(A, C []float32)) {
	for i0 := 0; i0 < m; i0 += 4 {
		rows := min(4, m-i0)
		if rows == 4 {
			f(a[i0*k:], c[i0*n:])
			continue
		}
		A, C := pa[:4*k], pc[:4*n]
		copy(A, a[i0*k:(i0+rows)*k])
		clear(A[rows*k:])
		f(A, C)
		copy(c[i0*n:(i0+rows)*n], C)
	}
}

// transposeLoop is transposeTo's portable loop.
func transposeLoop(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	for r := range rows {
		for c, v := range src[r*lds : r*lds+cols] {
			dst[c*ldd+r] = v
		}
	}
}
