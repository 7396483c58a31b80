package nn

import (
	"github.com/dpmf-go/dpmf/blas"
	gblas "gonum.org/v1/gonum/blas"
)

// Implicit convolutions. A stride-1 convolution whose padding keeps the
// map's size (Kernel = 2 Pad + 1) runs without im2col: each example's
// input is copied once into a zero-bordered map of width Wp = W + 2 Pad
// (xp), and for kernel row kr the unfolded rows are windows of it: output
// pixel q = oh Wp + ow (ow < W; the Wp - W columns between are garbage,
// computed and dropped) reads xp[(q + kr Wp) C : ... + K C], K C floats
// starting C floats after the previous row's. Those overlapping rows are
// the A of an ordinary product (blas.Serial32.SgemmOverlapA), so a
// convolution is K products of depth K C, summed:
//
//   - forward: out_wide = sum_kr A_kr W_kr (W_kr the kernel row's K C
//     weight rows), compacted to the W real columns;
//   - per-example weight gradient: rows kr of U^T G are A_kr^T G_wide,
//     with G_wide the output gradient in the same wide layout, zero in
//     the garbage columns (it is a window of gp, the output gradient in a
//     zero-bordered map);
//   - input gradient: the transposed convolution, the same construction
//     on gp with the kernel flipped (dx_wide = sum_kr B_kr W'_kr,
//     W'_kr[(kc, o), c] = W[(K-1-kr, K-1-kc, c), o]).
//
// This writes the input once instead of K^2 times (im2col) and adds the
// input gradient once instead of K^2 times (col2im), for (wide - P)/P more
// flops (the garbage columns: 6% at 32x32 with K = 3, 12% at 16x16, 22%
// at 8x8). implicitPays weighs the two.

// moveCost is what a float moved through memory costs, in multiply-adds
// of the product kernel (at about 100 GFLOP/s).
const moveCost = 45

// implicitPays reports whether a stride-1 'same' convolution is cheaper
// as implicit products than through im2col: the garbage columns' extra
// multiply-adds in the three products, 3 (wide - P) fi fo, against
// im2col's copy and col2im's add of P fi floats, each about as costly as
// moveCost multiply-adds (a float moved through memory against the
// kernel's rate of about 100 GFLOP/s).
func implicitPays(wide, P, fi, fo int) bool {
	return 3*(wide-P)*fo < 2*moveCost*P
}

// setImplicit decides how a convolution stage runs and sets the implicit
// layout's sizes.
func (s *stage) setImplicit() {
	if s.kind != kConv || s.stride != 1 || 2*s.pad+1 != s.k {
		return
	}
	wp, hp := s.in.W+2*s.pad, s.in.H+2*s.pad
	wide := (s.out.H-1)*wp + s.out.W
	if !implicitPays(wide, s.P, s.fi, s.fo) {
		return
	}
	s.implicit, s.wp2, s.hp2, s.wide = true, wp, hp, wide
	s.wideM = (wide + implicitRows - 1) / implicitRows * implicitRows
	s.pwr = make([]blas.PackedB32, s.k)
	s.pwx = make([]blas.PackedB32, s.k)
	s.wflip = make([]float32, s.fi*s.fo)
	s.offX, s.offG = make([]int, s.k), make([]int, s.k)
	for kr := range s.k {
		s.offX[kr], s.offG[kr] = kr*wp*s.in.C, kr*wp*s.fo
	}
}

// implicitRows is the multiple of rows an implicit convolution's
// forward and input-gradient products compute: a multiple of every
// float32 micro-kernel's row count (4, 6 and 12), so that no product
// ends in a ragged row panel, which the GEMM would copy into a
// zero-padded panel and compute into a scratch tile. The rows past the
// wide output are garbage like its gap columns: each row of a product
// depends on its own row of A only, so the others keep their bits.
const implicitRows = 12

// xpLen and gpLen are one example's zero-bordered input and output
// gradient maps, with the wideM - wide rows of zeros the padded
// products read past the map (and implicitRows more floats for the
// weight gradient's padded rows, implicitWeightGrad).
func (s *stage) xpLen() int { return (s.hp2*s.wp2+s.wideM-s.wide)*s.in.C + implicitRows }
func (s *stage) gpLen() int { return (s.hp2*s.wp2 + s.wideM - s.wide) * s.fo }

// packImplicit packs the kernel rows of the (permuted) weight for the
// forward products and, with back, of the flipped kernel for the input
// gradient's.
func (s *stage) packImplicit(back bool) {
	K, C, fo := s.k, s.in.C, s.fo
	KC := K * C
	for kr := range K {
		blas.PackB32(gblas.NoTrans, KC, fo, 1, s.wp[kr*KC*fo:(kr+1)*KC*fo], fo, &s.pwr[kr])
	}
	if s.src == 0 || !back {
		return
	}
	// wflip rows (kr, kc, o), columns c: W[(K-1-kr, K-1-kc, c), o].
	for kr := range K {
		for kc := range K {
			src := s.wp[((K-1-kr)*K+K-1-kc)*C*fo:]
			dst := s.wflip[(kr*K+kc)*fo*C:]
			for c := range C {
				for o, v := range src[c*fo : (c+1)*fo] {
					dst[o*C+c] = v
				}
			}
		}
		blas.PackB32(gblas.NoTrans, K*fo, C, 1, s.wflip[kr*K*fo*C:(kr+1)*K*fo*C], C, &s.pwx[kr])
	}
}

// kernelRows writes into c (m x n, rows ldc apart) the sum over the
// kernel rows kr of A_kr W_kr, A_kr the m rows of lda floats starting
// lda apart at a[offs[kr]] and W_kr the packed b[kr]: one product per
// kernel row, each added into c in turn. (One product over all the
// kernel rows, each tile of c taking them all while in L1, gave the same
// bits and no measurable gain: c's passes through L2 cost what rereading
// the kernel rows' weights for every tile costs.)
func (p *Plan) kernelRows(w *worker, m int, a []float32, lda int, offs []int, b []blas.PackedB32, c []float32, ldc int) {
	for kr := range b {
		beta := float32(1)
		if kr == 0 {
			beta = 0
		}
		w.sgemmPackedOverlap(m, a[offs[kr]:], lda, &b[kr], beta, c, ldc)
	}
}

// padInto copies the H x W x C map x into the interior of the zero-bordered
// map xp (borders are never written, so they stay zero).
func padInto(x, xp []float32, H, W, C, pad int) {
	wp := W + 2*pad
	for h := range H {
		copy(xp[((h+pad)*wp+pad)*C:((h+pad)*wp+pad+W)*C], x[h*W*C:(h+1)*W*C])
	}
}

// compact copies the W real columns of each of the H rows of a wide map
// (rows wp apart) into x.
func compact(wide, x []float32, H, W, C, wp int) {
	for h := range H {
		copy(x[h*W*C:(h+1)*W*C], wide[h*wp*C:(h*wp+W)*C])
	}
}

// implicitForward runs an implicit convolution's products for m
// examples, writing the output into out: bias and activation applied
// example by example while it is in cache when the activation keeps no
// pre-activation (else by the caller, over the chunk).
func (p *Plan) implicitForward(w *worker, i, m int, in, out []float32) (biased bool) {
	s := &p.stages[i]
	C, fo := s.in.C, s.fo
	isz, osz, xsz := s.in.Size(), s.out.Size(), s.xpLen()
	wide := w.wide[:s.wideM*fo]
	bias := p.params[s.b.Offset : s.b.Offset+s.b.Len]
	if s.noBias != nil {
		bias = s.noBias
	}
	biased = s.act <= ReLU
	for j := range m {
		xp := w.xp[i][j*xsz : (j+1)*xsz]
		padInto(in[j*isz:(j+1)*isz], xp, s.in.H, s.in.W, C, s.pad)
		p.kernelRows(w, s.wideM, xp, C, s.offX, s.pwr, wide, fo)
		o := out[j*osz : (j+1)*osz]
		if !biased {
			compact(wide, o, s.out.H, s.out.W, fo, s.wp2)
			continue
		}
		// Bias and activation while compacting: one pass from the wide
		// rows into the output.
		rw := s.out.W * fo
		if row := w.biasRow[:rw]; s.act == Tanh && fo%8 == 0 {
			// A whole map row per call, the bias repeated: the vector
			// kernels take every entry either way (fo a multiple of
			// 8), so the bits are biasAct's per pixel.
			if j == 0 {
				for k := 0; k < rw; k += fo {
					copy(row[k:k+fo], bias)
				}
			}
			for h := range s.out.H {
				biasTanhTo(o[h*rw:(h+1)*rw], wide[h*s.wp2*fo:], row)
			}
			continue
		}
		for h := range s.out.H {
			biasActTo(o[h*rw:(h+1)*rw], wide[h*s.wp2*fo:], bias, s.act)
		}
	}
	return biased
}

// implicitBackward writes the output gradients of m examples, times the
// activation's derivative, into their zero-bordered maps gp (in one pass
// from dout for Identity, Tanh and ReLU; others are applied to dout
// first) and, unless the stage reads the network's input, the input
// gradients into din. For the first kind dout itself is left as it was:
// the stage's output gradient is read from gp after (gradView).
func (p *Plan) implicitBackward(w *worker, i, m int, dout, din []float32) {
	s := &p.stages[i]
	C, fo := s.in.C, s.fo
	isz, osz, gsz := s.in.Size(), s.out.Size(), s.gpLen()
	if !s.gpFilled {
		if !fusesActGrad(s.act) {
			p.actGrad(w, i, dout[:m*osz])
		}
		a := w.act[i+1]
		H, W, pad, wp := s.out.H, s.out.W, s.pad, s.wp2
		for j := range m {
			g, gp := dout[j*osz:(j+1)*osz], w.gp[i][j*gsz:(j+1)*gsz]
			for h := range H {
				dst := gp[((h+pad)*wp+pad)*fo : ((h+pad)*wp+pad+W)*fo]
				k := j*osz + h*W*fo
				if fusesActGrad(s.act) {
					actGradTo(dst, g[h*W*fo:(h+1)*W*fo], a[k:k+W*fo], s.act)
				} else {
					copy(dst, g[h*W*fo:(h+1)*W*fo])
				}
			}
		}
	}
	if s.src == 0 {
		return
	}
	wide := w.wide[:s.wideM*C]
	for j := range m {
		gp := w.gp[i][j*gsz : (j+1)*gsz]
		p.kernelRows(w, s.wideM, gp, fo, s.offG, s.pwx, wide, C)
		if !s.gradToGp {
			compact(wide, din[j*isz:(j+1)*isz], s.in.H, s.in.W, C, s.wp2)
			continue
		}
		// Into the producer's bordered map, its derivative applied
		// (fuseGrads): what its own backward would write from din.
		q := &p.stages[s.src-1]
		gq := w.gp[s.src-1][j*q.gpLen() : (j+1)*q.gpLen()]
		a := w.act[s.src][j*isz : (j+1)*isz]
		rw := s.in.W * C
		for h := range s.in.H {
			off := ((h+q.pad)*q.wp2 + q.pad) * C
			actGradTo(gq[off:off+rw], wide[h*s.wp2*C:], a[h*rw:(h+1)*rw], q.act)
		}
	}
}

// poolGradToGp is a max pool's backward pass for m examples written
// straight into its producer's bordered map (fuseGrads): each window's
// gradient goes to its maximum's pixel times the producer's activation
// derivative, every other pixel's is zero. The windows do not overlap, so
// each pixel receives at most one gradient: the values
// actGradTo would give on the pooled-back gradient (0 + g, then the
// derivative's roundings), bit for bit.
func (p *Plan) poolGradToGp(w *worker, i, m int, dout []float32) {
	s := &p.stages[i]
	q := &p.stages[s.src-1]
	isz, osz := s.in.Size(), s.out.Size()
	C, H, W := s.in.C, s.in.H, s.in.W
	rw := W * C
	for j := range m {
		gq := w.gp[s.src-1][j*q.gpLen() : (j+1)*q.gpLen()]
		for h := range H {
			off := ((h+q.pad)*q.wp2 + q.pad) * C
			clear(gq[off : off+rw])
		}
		a := w.act[s.src][j*isz : (j+1)*isz]
		arg := w.arg[i][j*osz : (j+1)*osz]
		g := dout[j*osz : (j+1)*osz]
		// Pixel x = h rw + r of the map is gq[x + base + h step].
		base, step := q.pad*(q.wp2+1)*C, (q.wp2-W)*C
		orw := s.out.W * C
		for oh := range s.out.H {
			for k := oh * orw; k < (oh+1)*orw; k++ {
				x := int(arg[k])
				h := oh * s.pool // the window's rows: oh pool, ...
				for x >= (h+1)*rw {
					h++
				}
				gq[x+base+h*step] = actGrad1(g[k], a[x], q.act)
			}
		}
	}
}

// actGrad1 is actGradTo's value for one entry whose pooled-back gradient
// is 0 + g.
func actGrad1(g, a float32, act Activation) float32 {
	d := float32(0)
	d += g
	switch act {
	case Tanh:
		return d * (1 - a*a)
	case ReLU:
		if a > 0 {
			return d
		}
		return 0
	}
	return d
}

// gradView is example j's output gradient (the activation's derivative
// applied) of implicit stage i as the wide rows of gp: the real pixels,
// with zeros in the garbage columns.
func (w *worker) gradView(s *stage, i, j int) []float32 {
	off := j*s.gpLen() + (s.pad*s.wp2+s.pad)*s.fo
	return w.gp[i][off : off+s.wide*s.fo]
}

// implicitWeightGrad writes (beta 0) or adds (beta 1) example j's weight
// gradient U_j^T G_j into M (fi x fo, rows in the internal order).
func (p *Plan) implicitWeightGrad(w *worker, i, j int, beta float32, M []float32) {
	s := &p.stages[i]
	C, fo, K := s.in.C, s.fo, s.k
	KC := K * C
	xp := w.xp[i][j*s.xpLen() : (j+1)*s.xpLen()]
	gw := w.gradView(s, i, j)
	// The K products share their right operand G_wide: packed once.
	blas.PackB32(gblas.NoTrans, s.wide, fo, 1, gw, fo, &w.gpk)
	if KC%implicitRows == 0 || beta != 0 {
		for kr := range K {
			w.sgemmPackedOverlapT(KC, xp[kr*s.wp2*C:], C, &w.gpk, beta, M[kr*KC*fo:(kr+1)*KC*fo], fo)
		}
		return
	}
	// A ragged row count (the first layer's K C = 9): the product
	// computes rows up to a multiple of implicitRows into w.wide, reading
	// A in place instead of copying it into a padded panel (each row of
	// the product depends on its own row of A only: the first K C keep
	// their bits), and the first K C rows are copied out.
	KM := (KC + implicitRows - 1) / implicitRows * implicitRows
	tmp := w.wide[:KM*fo]
	for kr := range K {
		w.sgemmPackedOverlapT(KM, xp[kr*s.wp2*C:], C, &w.gpk, 0, tmp, fo)
		copy(M[kr*KC*fo:(kr+1)*KC*fo], tmp)
	}
}
