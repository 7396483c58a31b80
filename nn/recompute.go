package nn

import (
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
				addScaledDown(w.acc[s.b.Offset:s.b.Offset+s.b.Len], p.exGrad(w, s, j)[s.w.Len:], f)
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
