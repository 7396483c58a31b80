package nn

import (
	"math"

	gblas "gonum.org/v1/gonum/blas"

	"github.com/dpmf-go/dpmf/blas"
)

// Recomputed per-example weight gradients. On the private path a
// convolution's per-example weight gradient M = U_iᵀ G_i (fi x fo) is
// needed twice: for its squared norm, and, once the clipper has seen every
// layer's norm, scaled into the sum. Stored whole, a large M (WRN-16-4's
// 8x8x256 layers: 2.4 MB each, 8 MB an example) leaves the caches: it is
// written to memory, read back for its norm and again for the sum, about
// three floats moved per entry, while computing an entry costs only P
// multiply-adds (P = 64 output pixels at 8x8). Such a layer computes M
// twice instead, in panels of rows that stay in cache: once for the norm
// (the panels' squares go to sumsq64's partial sums, so the norm is
// sumsq64 of M bit for bit), once after the clipper to add the scaled
// panels into the accumulator. Each panel is rows of the same product, so
// its entries are M's bit for bit, and the sum is what adding the stored
// M gave.

// recomputePays reports whether an im2col convolution's per-example weight
// gradient is cheaper computed twice (P more multiply-adds an entry) than
// stored and read back (about three floats moved an entry, moveCost
// multiply-adds each). Panels must be whole multiples of 16 floats
// (sumsq64's partial sums), hence fo; and the stored path's product must
// run on the product kernel, as the panels' do (blas hands products of
// m*n*k up to 512 to gonum's loops, summed in another order).
func recomputePays(P, fi, fo int) bool { return P < 3*moveCost && fo%16 == 0 && P*fi*fo > 512 }

// setRecompute decides whether a convolution stage recomputes its
// per-example weight gradient and sizes its panels (about 256 KiB, rows a
// multiple of 48, whole micro-panels of every product kernel; rows if
// positive).
func (s *stage) setRecompute(rows int) {
	if s.kind != kConv || s.implicit || !recomputePays(s.P, s.fi, s.fo) {
		return
	}
	s.recompute = true
	s.panel = min(s.fi, max(48, (1<<16)/s.fo/48*48))
	if rows > 0 {
		s.panel = min(s.fi, rows)
	}
}

// recomputedNorm returns the squared norm of the example's weight gradient
// Uᵀ G and bias gradient (written into bias, as the stored path does), and
// the gradient's L-inf norm when asked for, computing the weight gradient
// panel by panel.
func (p *Plan) recomputedNorm(w *worker, s *stage, U, G, bias []float32) (sq, linf float64) {
	var lanes sumsqLanes
	p.panels(w, s, U, G, func(_ int, pan []float32) {
		lanes.add(pan)
		if p.opt.LInf {
			linf = max(linf, maxAbs(pan))
		}
	})
	if len(bias) > 0 {
		colSums(G, s.fo, w.col)
		for k, v := range w.col[:s.fo] {
			bias[k] = float32(v)
		}
		lanes.add(bias)
		if p.opt.LInf {
			linf = max(linf, maxAbs(bias))
		}
	}
	return lanes.total(), linf
}

// addRecomputed adds the chunk's m examples' recomputed convolution
// gradients, MulDown(f, ·) of each weight gradient panel by panel and of
// the stored bias gradient, into the accumulator: for each panel the
// examples in order, so that the panel of the accumulator stays in cache
// while the chunk's examples are added to it (each entry still takes the
// examples in order, as adding them one after the other did).
func (p *Plan) addRecomputed(w *worker, m int) {
	for i := range p.stages {
		s := &p.stages[i]
		if !s.recompute {
			continue
		}
		for j := range m {
			_, G := w.affineIO(s, i, j)
			blas.PackB32(gblas.NoTrans, s.P, s.fo, 1, G, s.fo, &w.gpks[j])
		}
		acc := w.acc[s.w.Offset : s.w.Offset+s.w.Len]
		for r0 := 0; r0 < s.fi; r0 += s.panel {
			rows := min(s.panel, s.fi-r0)
			pan := w.pan[:rows*s.fo]
			for j := range m {
				f, ok := p.factor(w, j, s.aff)
				if !ok {
					continue
				}
				U, _ := w.affineIO(s, i, j)
				w.sgemmPackedOverlapT(rows, U[r0:], s.fi, &w.gpks[j], 0, pan, s.fo)
				addScaledDown(acc[r0*s.fo:], pan, f)
			}
		}
		for j := range m {
			if f, ok := p.factor(w, j, s.aff); ok {
				addScaledDown(w.acc[s.b.Offset:s.b.Offset+s.b.Len], p.exBias(w, s, j), f)
			}
		}
	}
}

// panels computes rows [r0, r0+panel) of Uᵀ G (U: P x fi, G: P x fo) for
// each r0 in turn into the worker's panel buffer and hands them to use
// (the same products as addRecomputed's). Copying each panel's rows of
// Uᵀ out row-major first, for the product to read A row by row (12% faster
// alone), cost more than it saved: 5% of a WRN-16-4 step.
func (p *Plan) panels(w *worker, s *stage, U, G []float32, use func(r0 int, pan []float32)) {
	blas.PackB32(gblas.NoTrans, s.P, s.fo, 1, G, s.fo, &w.gpk)
	for r0 := 0; r0 < s.fi; r0 += s.panel {
		rows := min(s.panel, s.fi-r0)
		pan := w.pan[:rows*s.fo]
		w.sgemmPackedOverlapT(rows, U[r0:], s.fi, &w.gpk, 0, pan, s.fo)
		use(r0, pan)
	}
}

// Ghost norms for convolutions. An im2col convolution's per-example
// weight gradient U_iᵀ G_i (U_i: P x fi, G_i: P x fo) has the squared
// norm ⟨U_i U_iᵀ, G_i G_iᵀ⟩ (the ghost norm, Li et al. 2021): two P x P
// Gram matrices, P²(fi+fo) multiply-adds in float64 (less for stride 1,
// below), instead of the product's P fi fo. With few output pixels and
// wide layers (WRN-16-4's 8x8x256 layers: P = 64, fi = 2304, fo = 256,
// 2M multiply-adds in float64 against 38M) the norm costs little; the
// clipped sum is then one product over the chunk's examples,
// Uᵀ (diag(f) G) (Bu et al. 2022), accumulated into the sum, instead of
// each example's gradient computed, scaled and added.
//
// The bound (docs/math.md §9.4). The gradient added is no longer the
// vector whose norm was taken: it is U_iᵀ G'_i with G'_i = F G_i rounded
// entry by entry (F the float32 factor), which differs from F U_iᵀ G_i by
// U_iᵀ E with |E| <= 2^-24 F|G_i| entrywise (and up to 2^-150 more an
// entry where F G_i is subnormal: G' is not flushed, so F = 1 leaves G
// exact). Under cancellation (U_iᵀ G_i a sum of nearly opposite terms)
// ‖U_iᵀ E‖ is not small against ‖U_iᵀ G_i‖, only against ‖U_i‖‖G_i‖;
// and the float64 Gram matrices are exact only to (fi+fo+P²) 2^-53 of
// ⟨|U_i||U_i|ᵀ, |G_i||G_i|ᵀ⟩ <= ‖U_i‖²‖G_i‖² = B. So the norm the clipper
// sees is the bound
//
//	Y = sqrt(max(S, 0) + a B) + 2^-23 sqrt(B),  a = 2(fi+fo+P²+P(fi+fo)+k²+8) 2^-53,
//
// with S the float64 ghost sum and B from the Gram matrices' traces:
// ‖U_iᵀ G_i‖ + 2^-24‖U_i‖‖G_i‖ <= Y in every case (a covers the traces'
// rounding too). The subnormal part, at most e = 2^-149 sqrt(P fo)‖U_i‖,
// is absolute: the weight is scaled by F = Factor32(max(0, f - e/Y))
// instead of f, so that F(1+2^-24)Y + e <= f(1+2^-24)Y. Then the
// contribution has norm at most f(1+2^-24)^2 times sqrt(Y² + ‖bias‖²),
// the norm reported: Clipper.Scale's bound, covered by the clip factor's
// 2^-20 margin. For ordinary values e/Y is below 2^-100 and F = f; the
// norm exceeds the ghost norm by a relative 2^-23 sqrt(B/S) (about 2^-20
// for P = 64 uncorrelated pixels): a slightly smaller contribution.
// Terms of the product cannot overflow: each entry of U_iᵀ|G'_i| is at
// most ‖U_i‖‖G'_i‖ <= 2^23 (1+2^-20) f Y <= 2^24 ζ, and ζ times the
// number of examples stays below 10^30 (§9.4).

// A stride-1 convolution's U U^T comes from the input map's Gram matrix
// instead (im2col rows are shifted copies of the map's pixels): with X
// the example's input (n = H W pixels of C channels, NHWC) and Xg = X Xᵀ,
// (U Uᵀ)_{o,o'} = Σ_δ Xg[o+δ, o'+δ] over the kernel's offsets δ that fall
// inside the map for both (the others read padding zeros): n²C + P²k²
// instead of P² k²C (a ninth at 8x8 with 3x3 kernels). It is the same sum
// of the same products, grouped by offset, so the bound above holds as
// written (a counts the k² partial sums).

// ghostPays reports whether a convolution's per-example norm is cheaper as
// a ghost norm: the two Gram matrices in float64 (at these shapes about
// four times a float32 product's multiply-add, measured) against one
// product of the per-example gradient (what the stored or recomputed norm
// costs besides the sum).
func (s *stage) ghostPays() bool {
	gram := s.P * s.P * (s.fi + s.fo)
	if s.stride == 1 {
		n := s.in.H * s.in.W
		gram = n*n*s.in.C + s.P*s.P*(s.fo+s.k*s.k)
	}
	return 4*gram < s.P*s.fi*s.fo
}

// ghostBlock is the columns of U widened to float64 at a time for its
// Gram matrix (P x ghostBlock float64: 128 KiB at P = 64).
const ghostBlock = 256

// sumProduct adds Uᵀ G over the chunk's m examples of im2col
// convolution stage i into the accumulator: the book-keeping product of
// the non-private path and of ghost convolutions (whose G rows are
// scaled). A large accumulator (panelSum) takes it in panels of rows
// computed into a buffer in cache, example by example (one product of
// P rows each, the layout addRecomputed reads: a product over the
// chunk's m P rows of U, read transposed in place, ran twice as slow in
// the step as alone, these 1.3 times), and added in one streaming pass.
func (p *Plan) sumProduct(w *worker, s *stage, i, m int) {
	rows := m * s.P
	U, G, acc := w.u[i][:rows*s.fi], w.d[i+1][:rows*s.fo], w.acc[s.w.Offset:s.w.Offset+s.w.Len]
	if !s.panelSum {
		w.sgemm(gblas.Trans, gblas.NoTrans, s.fi, s.fo, rows, 1, U, s.fi, G, s.fo, 1, acc, s.fo)
		return
	}
	for j := range m {
		blas.PackB32(gblas.NoTrans, s.P, s.fo, 1, G[j*s.P*s.fo:], s.fo, &w.gpks[j])
	}
	for r0 := 0; r0 < s.fi; r0 += ghostPanel {
		n := min(ghostPanel, s.fi-r0)
		pan := w.pan[:n*s.fo]
		for j := range m {
			beta := float32(1)
			if j == 0 {
				beta = 0
			}
			w.sgemmPackedOverlapT(n, U[j*s.P*s.fi+r0:], s.fi, &w.gpks[j], beta, pan, s.fo)
		}
		add(acc[r0*s.fo:(r0+n)*s.fo], pan)
	}
}

// ghostPanel is the rows of sumProduct's panels (240 x 256 floats at
// most, in cache): the accumulator (2.4 MB a layer for WRN-16-4) is then
// read and written sequentially, once a chunk, instead of tile by tile by
// the product kernel.
const ghostPanel = 240

// setGhost decides whether a convolution stage takes ghost norms
// (im2col, without an L-inf norm, which a ghost norm does not give).
func (s *stage) setGhost(linf bool) {
	if s.kind != kConv || s.implicit {
		return
	}
	s.panelSum = 4*s.fi*s.fo > 1<<20
	s.ghost = !linf && s.ghostPays()
}

// ghostLen is the float64 scratch a ghost stage needs: the widened
// columns of U or the input map, and the map's Gram matrix.
func (s *stage) ghostLen() (ud, xg int) {
	if s.stride == 1 {
		n := s.in.H * s.in.W
		return n * s.in.C, n * n
	}
	return s.P * min(s.fi, ghostBlock), 0
}

// ghostNorm returns the squared norm bound of the example's weight
// gradient Uᵀ G and bias gradient (written into bias, as the stored path
// does), Y² + ‖bias‖², and the ratio e/Y by which the weight's factor is
// lowered (see above).
func (p *Plan) ghostNorm(w *worker, s *stage, X, U, G, bias []float32) (sq, ratio float64) {
	P, fi, fo := s.P, s.fi, s.fo
	gx, gg := w.gx[:P*P], w.gg[:P*P]
	if s.stride == 1 {
		w.mapGram(s, X, gx)
	}
	for k0 := 0; k0 < fi && s.stride != 1; k0 += ghostBlock {
		kc := min(ghostBlock, fi-k0)
		ud := w.ud[:P*kc]
		for r := range P {
			widenTo(ud[r*kc:(r+1)*kc], U[r*fi+k0:r*fi+k0+kc])
		}
		beta := 1.0
		if k0 == 0 {
			beta = 0
		}
		w.dgemm(gblas.NoTrans, gblas.Trans, P, P, kc, 1, ud, kc, ud, kc, beta, gx, P)
	}
	gd := w.gd[:P*fo]
	widenTo(gd, G[:P*fo])
	w.dgemm(gblas.NoTrans, gblas.Trans, P, P, fo, 1, gd, fo, gd, fo, 0, gg, P)
	S, tu, tg := gramSums(gx, gg, P)
	Y, ratio := ghostBound(S, tu, tg, fi+fo+P*P+P*(fi+fo)+s.k*s.k, P*fo)
	sq = Y * Y
	if len(bias) > 0 {
		colSums(G, fo, w.col)
		for k, v := range w.col[:fo] {
			bias[k] = float32(v)
		}
		sq += sumsq64(bias)
	}
	return sq, ratio // NaN or Inf when U or G is not finite
}

// mapGram writes U Uᵀ of a stride-1 convolution's example into gx (P x
// P) from its input map X (see above).
func (w *worker) mapGram(s *stage, X []float32, gx []float64) {
	H, W, C := s.in.H, s.in.W, s.in.C
	n := H * W
	xd, xg := w.ud[:n*C], w.xg[:n*n]
	widenTo(xd, X[:n*C])
	w.dgemm(gblas.NoTrans, gblas.Trans, n, n, C, 1, xd, C, xd, C, 0, xg, n)
	clear(gx)
	OH, OW, P := s.out.H, s.out.W, s.P
	for ky := range s.k {
		for kx := range s.k {
			for oy := range OH {
				iy := oy + ky - s.pad
				if iy < 0 || iy >= H {
					continue
				}
				for ox := range OW {
					ix := ox + kx - s.pad
					if ix < 0 || ix >= W {
						continue
					}
					row := xg[(iy*W+ix)*n:]
					dst := gx[(oy*OW+ox)*P:]
					for py := range OH {
						jy := py + ky - s.pad
						if jy < 0 || jy >= H {
							continue
						}
						x0 := max(0, s.pad-kx)
						x1 := min(OW, W+s.pad-kx)
						if x1 <= x0 {
							continue
						}
						src := row[jy*W+x0+kx-s.pad : jy*W+x1+kx-s.pad]
						d := dst[py*OW+x0 : py*OW+x1]
						for q, v := range src {
							d[q] += v
						}
					}
				}
			}
		}
	}
}

// gramSums returns the ghost sum ⟨gx, gg⟩ of two P x P Gram matrices
// and their traces, in float64.
func gramSums(gx, gg []float64, P int) (S, tu, tg float64) {
	for k, v := range gx[:P*P] {
		S += v * gg[k]
	}
	for r := range P {
		tu += gx[r*P+r]
		tg += gg[r*P+r]
	}
	return S, tu, tg
}

// ghostBound is the norm bound Y of a ghost weight gradient Uᵀ G and the
// reduction e/Y of its factor (see above), from the float64 ghost sum S,
// the Gram matrices' traces tu = ‖U‖² and tg = ‖G‖², the number of
// terms whose rounding a covers (a = 2(terms+8) 2^-53) and G's entries
// (P fo).
func ghostBound(S, tu, tg float64, terms, cells int) (Y, ratio float64) {
	B := tu * tg
	a := float64(2*(terms+8)) * 0x1p-53
	Y = math.Sqrt(max(S, 0)+a*B) + 0x1p-23*math.Sqrt(B)
	if e := 0x1p-149 * math.Sqrt(float64(cells)*tu); e > 0 {
		ratio = e / Y // +Inf when Y = 0: G is zero, and so is its contribution
	}
	return Y, ratio
}

// widenTo writes v into d as float64 (exact: the vector kernel's
// conversions are these).
func widenTo(d []float64, v []float32) {
	d = d[:len(v)]
	n := widenFast(d, v)
	for k, x := range v[n:] {
		d[n+k] = float64(x)
	}
}

// addGhost adds the chunk's m examples' clipped gradients of the ghost
// convolutions: each kept example's output-gradient rows scaled by its
// weight factor (rounded to nearest, not flushed: see above), a dropped
// example's rows and inputs zeroed (0*Inf is NaN), then one product
// Uᵀ G' over the chunk into the sum; the stored bias gradients scaled by
// MulDown and added in order.
func (p *Plan) addGhost(w *worker, m int) {
	for i := range p.stages {
		s := &p.stages[i]
		if !s.ghost {
			continue
		}
		accB := w.acc[s.b.Offset : s.b.Offset+s.b.Len]
		for j := range m {
			U, G := w.affineIO(s, i, j)
			f, ok := p.factor(w, j, s.aff)
			if !ok {
				clear(U)
				clear(G)
				continue
			}
			ghostScale(G, f, w.gr[j*p.naff+s.aff])
			if s.b.Len > 0 {
				addScaledDown(accB, p.exBias(w, s, j), f)
			}
		}
		p.sumProduct(w, s, i, m)
	}
}

// ghostScale scales an example's output-gradient rows G in place for a
// ghost convolution whose clip factor is f and factor reduction ratio
// (ghostNorm's e/Y): by F = Factor32(max(0, f - ratio)), each product
// rounded to nearest, not flushed (F = 1 leaves G exact).
func ghostScale(G []float32, f, ratio float64) {
	F := Factor32(max(0, f-ratio))
	for k, v := range G {
		G[k] = F * v
	}
}

// dgemm is the worker's float64 product, logged while a log is attached.
func (w *worker) dgemm(tA, tB gblas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	dgemmLogged(w.log, &w.gemm64, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// dgemmLogged is g's float64 product, logged and timed into l unless l
// is nil (the Plan's and the SeqPlan's workers).
func dgemmLogged(l *productLog, g *blas.Serial64, tA, tB gblas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if l != nil {
		t0 := l.start()
		g.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		l.done(Product{TransA: tA == gblas.Trans, TransB: tB == gblas.Trans, M: m, N: n, K: k, LDA: lda, LDB: ldb, LDC: ldc, Beta: float32(beta), Count: 1, Float64: true}, t0)
		return
	}
	g.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
