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
// layout's sizes (stride-2 convolutions only with stride2).
func (s *stage) setImplicit(stride2 bool) {
	if s.kind != kConv {
		return
	}
	var wp, hp, wq, gh, gpad int
	switch {
	case s.stride == 1 && 2*s.pad+1 == s.k:
		wp, hp = s.in.W+2*s.pad, s.in.H+2*s.pad
		wq, gh, gpad = wp, hp, s.pad
	case stride2 && s.stride2():
		// The wide rows are the output's rows at the pitch of the
		// bordered map's half width (one garbage column a row); the
		// output gradient sits in the top left of a map one column and
		// one row larger (stride2.go).
		wp, hp = s.in.W+2, s.in.H+2
		wq, gh = wp/2, s.out.H+1
		if recomputePays(s.P, s.fi, s.fo) {
			return // few output pixels: recompute.go's im2col path
		}
	default:
		return
	}
	wide := (s.out.H-1)*wq + s.out.W
	if !implicitPays(wide, s.P, s.fi, s.fo) {
		return
	}
	s.implicit, s.wp2, s.hp2, s.wq, s.gh, s.gpad, s.wide = true, wp, hp, wq, gh, gpad, wide
	s.wideM = (wide + implicitRows - 1) / implicitRows * implicitRows
	s.pwr = make([]blas.PackedB32, s.k)
	s.pwx = make([]blas.PackedB32, s.k)
	if s.stride == 2 {
		s.pwx = make([]blas.PackedB32, len(stride2Blocks))
	}
	C := s.in.C
	s.offX = make([]int, s.k)
	for kr := range s.k {
		s.offX[kr] = kr * wp * C
		if s.stride == 2 {
			// Rows of the bordered map stored even ones first (padInto).
			s.offX[kr] = ((kr%2)*(hp/2) + kr/2) * wp * C
		}
	}
	if s.stride == 1 {
		s.offG = make([]int, s.k)
		for kr := range s.k {
			s.offG[kr] = kr * wp * s.fo
		}
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
func (s *stage) xpLen() int {
	return s.hp2*s.wp2*s.in.C + (s.wideM-s.wide)*s.stride*s.in.C + implicitRows
}
func (s *stage) gpLen() int { return (s.gh*s.wq + s.wideM - s.wide) * s.fo }

// wideLen is the floats of an implicit convolution's wide product
// (forward and input gradient).
func (s *stage) wideLen() int {
	return s.wideM * max(s.fo, s.stride*s.in.C)
}

// gpPix is the pixel of gp that holds output row h's first pixel; gp's
// rows are wq pixels apart.
func (s *stage) gpPix(h int) int { return (h+s.gpad)*s.wq + s.gpad }

// padInto copies one example's H x W x C input x into the interior of its
// zero-bordered map xp (borders are never written, so they stay zero): as
// it is for stride 1, with the rows of even bordered index first for
// stride 2 (so that a kernel row's windows are rows 2C apart).
func (s *stage) padInto(x, xp []float32) {
	if s.stride == 1 {
		padInto(x, xp, s.in.H, s.in.W, s.in.C, s.pad)
		return
	}
	rw := s.in.W * s.in.C
	for h := range s.in.H {
		o := s.xpPix(h) * s.in.C
		copy(xp[o:o+rw], x[h*rw:(h+1)*rw])
	}
}

// xpPix is the pixel of xp that holds input row h's first pixel.
func (s *stage) xpPix(h int) int {
	r := h + s.pad // the bordered row
	if s.stride == 2 {
		r = (r%2)*(s.hp2/2) + r/2
	}
	return r*s.wp2 + s.pad
}

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
	if s.stride == 2 {
		s.packStride2()
		return
	}
	// wflip rows (kr, kc, o), columns c: W[(K-1-kr, K-1-kc, c), o].
	for kr := range K {
		for kc := range K {
			src := s.wp[((K-1-kr)*K+K-1-kc)*C*fo:]
			dst := s.wflip[(kr*K+kc)*fo*C:]
			transposeTo(dst, C, src, fo, C, fo)
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
	p.kernelRowRuns(w, m, 0, 0, 0, a, lda, offs, b, c, ldc)
}

// kernelRowRuns is kernelRows computing, with period > 0, only the
// first wide rows i of c with i mod period < keep (a wide map's real
// pixels: keep = W of each row of period = wq pixels) where the
// products' row tile divides keep; the other rows of c are then left as
// they were. Each computed row has kernelRows' bits.
func (p *Plan) kernelRowRuns(w *worker, m, wide, period, keep int, a []float32, lda int, offs []int, b []blas.PackedB32, c []float32, ldc int) {
	rows := period > 0 && !p.opt.noRowRuns && b[0].RowTile() > 0 && keep%b[0].RowTile() == 0
	for kr := range b {
		beta := float32(1)
		if kr == 0 {
			beta = 0
		}
		if rows {
			w.sgemmPackedRows(wide, period, keep, a[offs[kr]:], lda, &b[kr], beta, c, ldc)
			continue
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

// outMap is where stage i's output for example j of the chunk lives,
// from its first pixel, and the floats between its rows: its activation
// buffer, or the interior of its consumer's bordered map when it writes
// there (toXp).
func (p *Plan) outMap(w *worker, i, j int) ([]float32, int) {
	s := &p.stages[i]
	if !s.toXp {
		return w.act[i+1][j*s.out.Size() : (j+1)*s.out.Size()], s.out.W * s.out.C
	}
	c := &p.stages[i+1]
	off := j*c.xpLen() + (c.pad*c.wp2+c.pad)*c.in.C
	return w.xp[i+1][off : off+((s.out.H-1)*c.wp2+s.out.W)*c.in.C], c.wp2 * c.in.C
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
		if !s.xpFilled {
			s.padInto(in[j*isz:(j+1)*isz], xp)
		}
		p.kernelRowRuns(w, s.wideM, s.wide, s.wq, s.out.W, xp, s.stride*C, s.offX, s.pwr, wide, fo)
		if !biased {
			compact(wide, out[j*osz:(j+1)*osz], s.out.H, s.out.W, fo, s.wq)
			continue
		}
		// Bias and activation while compacting: one pass from the wide
		// rows into the output (or the consumer's bordered map).
		o, ost := p.outMap(w, i, j)
		rw := s.out.W * fo
		if row := w.biasRow[:rw]; s.act == Tanh && fo%8 == 0 || s.act == Identity {
			// A whole map row per call, the bias repeated: the vector
			// kernels take every entry either way (fo a multiple of
			// 8 for tanh; the sum is one rounding), so the bits are
			// biasAct's per pixel.
			if j == 0 {
				for k := 0; k < rw; k += fo {
					copy(row[k:k+fo], bias)
				}
			}
			for h := range s.out.H {
				if s.act == Identity {
					addTo(o[h*ost:h*ost+rw], wide[h*s.wq*fo:], row)
				} else {
					biasTanhTo(o[h*ost:h*ost+rw], wide[h*s.wq*fo:], row)
				}
			}
			continue
		}
		for h := range s.out.H {
			biasActTo(o[h*ost:h*ost+rw], wide[h*s.wq*fo:], bias, s.act)
		}
	}
	return biased
}

// implicitBackward writes the output gradients of examples [lo, m) of
// the chunk, times the
// activation's derivative, into their zero-bordered maps gp (in one pass
// from dout for Identity, Tanh and ReLU; others are applied to dout
// first) and, unless the stage reads the network's input, the input
// gradients into din. For the first kind dout itself is left as it was:
// the stage's output gradient is read from gp after (gradView).
func (p *Plan) implicitBackward(w *worker, i, lo, m int, dout, din []float32) {
	s := &p.stages[i]
	C, fo := s.in.C, s.fo
	osz, gsz := s.out.Size(), s.gpLen()
	if !s.gpFilled {
		if !fusesActGrad(s.act) {
			p.actGrad(w, i, dout[:m*osz]) // (lo is 0: example by example only with fused derivatives)
		}
		H, W := s.out.H, s.out.W
		for j := lo; j < m; j++ {
			g, gp := dout[j*osz:(j+1)*osz], w.gpOf(i, gsz, j)
			a, ast := p.outMap(w, i, j)
			for h := range H {
				dst := gp[s.gpPix(h)*fo : (s.gpPix(h)+W)*fo]
				if fusesActGrad(s.act) {
					actGradTo(dst, g[h*W*fo:(h+1)*W*fo], a[h*ast:h*ast+W*fo], s.act)
				} else {
					copy(dst, g[h*W*fo:(h+1)*W*fo])
				}
			}
		}
	}
	if s.src == 0 {
		return
	}
	wide := w.wide[:s.wideLen()]
	for j := lo; j < m; j++ {
		gp := w.gpOf(i, gsz, j)
		if s.stride == 2 {
			p.stride2InputGrad(w, i, j, gp, wide, din)
			continue
		}
		p.kernelRowRuns(w, s.wideM, s.wide, s.wq, s.in.W, gp, fo, s.offG, s.pwx, wide, C)
		for h := range s.in.H {
			p.emitInputRow(w, i, j, h, wide[h*s.wp2*C:], din)
		}
	}
}

// emitInputRow writes row h of implicit stage i's input gradient for
// example j from src: into din, or into the producer's bordered map with
// its activation's derivative applied (fuseGrads), what the producer's
// own backward would write from din.
func (p *Plan) emitInputRow(w *worker, i, j, h int, src, din []float32) {
	s := &p.stages[i]
	C, isz := s.in.C, s.in.Size()
	rw := s.in.W * C
	if !s.gradToGp {
		copy(din[j*isz+h*rw:j*isz+(h+1)*rw], src)
		return
	}
	q := &p.stages[s.src-1]
	gq := w.gpOf(s.src-1, q.gpLen(), j)
	a, ast := p.outMap(w, s.src-1, j)
	off := q.gpPix(h) * C
	actGradTo(gq[off:off+rw], src, a[h*ast:h*ast+rw], q.act)
}

// readers counts, for every activation, the stages that read it, and
// gives one of them (the last, for an activation read once: its reader).
func (p *Plan) readers() (count, last []int) {
	count, last = make([]int, len(p.actShape)), make([]int, len(p.actShape))
	for i := range p.stages {
		s := &p.stages[i]
		count[s.src]++
		last[s.src] = i
		if s.kind == kJoin {
			count[s.skip]++
			last[s.skip] = i
		}
	}
	return count, last
}

// fuseJoins marks the residual joins whose gradient goes straight into
// the bordered output gradient of the implicit convolution that made the
// body's or the shortcut's activation, where the join is its only
// reader and actGradTo takes its activation (what that convolution's own
// backward would write from d, bit for bit): one copy of the gradient
// instead of two.
func (p *Plan) fuseJoins() {
	readers, _ := p.readers()
	fusable := func(a int) bool {
		if a == 0 || readers[a] != 1 {
			return false
		}
		q := &p.stages[a-1]
		return q.kind == kConv && q.implicit && fusesActGrad(q.act) && !q.gpFilled
	}
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind != kJoin {
			continue
		}
		if fusable(s.src) {
			s.gradToGp, p.stages[s.src-1].gpFilled = true, true
		}
		if s.skip != s.src && fusable(s.skip) {
			s.skipToGp, p.stages[s.skip-1].gpFilled = true, true
		}
	}
}

// gradIntoGp writes the gradient g w.r.t. the output of implicit
// convolution qi, for m examples, times its activation's derivative,
// into its bordered output gradient: what its backward writes from d.
func (p *Plan) gradIntoGp(w *worker, qi, m int, g []float32) {
	q := &p.stages[qi]
	osz, gsz, rw := q.out.Size(), q.gpLen(), q.out.W*q.fo
	for j := range m {
		gp := w.gpOf(qi, gsz, j)
		a, ast := p.outMap(w, qi, j)
		for h := range q.out.H {
			o, k := q.gpPix(h)*q.fo, j*osz+h*rw
			actGradTo(gp[o:o+rw], g[k:k+rw], a[h*ast:h*ast+rw], q.act)
		}
	}
}

// poolGradToGp is a max pool's backward pass for examples [lo, m) of
// the chunk written
// straight into its producer's bordered map (fuseGrads): each window's
// gradient goes to its maximum's pixel times the producer's activation
// derivative, every other pixel's is zero. The windows do not overlap, so
// each pixel receives at most one gradient: the values
// actGradTo would give on the pooled-back gradient (0 + g, then the
// derivative's roundings), bit for bit.
func (p *Plan) poolGradToGp(w *worker, i, lo, m int, dout []float32) {
	s := &p.stages[i]
	q := &p.stages[s.src-1]
	isz, osz := s.in.Size(), s.out.Size()
	windows := s.pool == 2 && s.out.W > 0 && !p.opt.noPoolWindows && poolBack2Fast(s.in.C, q.act)
	for j := lo; j < m; j++ {
		gq := w.gpOf(s.src-1, q.gpLen(), j)
		arg, g := w.arg[i][j*osz:(j+1)*osz], dout[j*osz:(j+1)*osz]
		// The derivative at each window's maximum: the pool's output
		// (poolOut), or its input at arg.
		var mx maxima
		if p.poolOut(s) {
			mx.o, mx.ost = p.outMap(w, i, j)
		} else {
			mx.a = w.act[s.src][j*isz : (j+1)*isz]
		}
		if windows {
			s.poolWindows2(q, gq, mx, arg, g)
		} else {
			s.poolScatter(q, gq, mx, arg, g)
		}
	}
}

// maxima is where a max pool's backward pass reads the value of each
// window's maximum: its input a (at arg), or its output o (rows ost
// floats apart).
type maxima struct {
	a, o []float32
	ost  int
}

// poolOut reports whether max pool s's backward pass takes its
// producer's activation derivative at its own output (the windows'
// maxima, which it writes into its consumer's map or its activation
// buffer) rather than at its input: a pool that writes into its
// producer's bordered map (gradToGp), whose input activation, read by
// nothing else after the forward pass, then need not be kept for the
// backward pass (groupSlot shares it between a group's chunks: the
// CIFAR CNN's second slot is 873 KiB instead of 1.3 MiB, and its step
// took 0.5-2.7% less CPU at batch 64, BENCHMARKS.md). None with
// Options.noPoolOut.
func (p *Plan) poolOut(s *stage) bool {
	return s.kind == kPool && s.gradToGp && !p.opt.noPoolOut
}

// poolScatter is poolGradToGp for one example: the producer's map
// interior cleared, then each window's gradient written at its maximum.
func (s *stage) poolScatter(q *stage, gq []float32, mx maxima, arg []int32, g []float32) {
	C, H, W := s.in.C, s.in.H, s.in.W
	rw := W * C
	for h := range H {
		off := q.gpPix(h) * C
		clear(gq[off : off+rw])
	}
	// Pixel x = h rw + r of the map is gq[x + base + h step].
	base, step := q.gpPix(0)*C, (q.wq-W)*C
	orw := s.out.W * C
	for oh := range s.out.H {
		for k := oh * orw; k < (oh+1)*orw; k++ {
			x := int(arg[k])
			h := oh * s.pool // the window's rows: oh pool, ...
			for x >= (h+1)*rw {
				h++
			}
			v := float32(0)
			if mx.a != nil {
				v = mx.a[x]
			} else {
				v = mx.o[oh*mx.ost+k-oh*orw]
			}
			gq[x+base+h*step] = actGrad1(g[k], v, q.act)
		}
	}
}

// poolWindows2 is poolGradToGp for one example of a 2x2 pool
// (poolBack2Fast): every window written whole by the vector kernel, the
// map's last row and column cleared where the pool drops them (odd H or
// W), so that no pass clears the map first.
func (s *stage) poolWindows2(q *stage, gq []float32, mx maxima, arg []int32, g []float32) {
	C, H, W := s.in.C, s.in.H, s.in.W
	rw, orw, row := W*C, s.out.W*C, q.wq*C
	for oh := range s.out.H {
		h := 2 * oh
		off := q.gpPix(h) * C
		if mx.a != nil {
			poolBack2Row(gq[off:], gq[off+row:], mx.a[h*rw:], mx.a[(h+1)*rw:], g[oh*orw:(oh+1)*orw], arg[oh*orw:], h*rw, C, rw, q.act)
		} else {
			poolBack2Out(gq[off:], gq[off+row:], mx.o[oh*mx.ost:], g[oh*orw:(oh+1)*orw], arg[oh*orw:], h*rw, C, rw, q.act)
		}
		if W%2 == 1 {
			clear(gq[off+(W-1)*C : off+W*C])
			clear(gq[off+row+(W-1)*C : off+row+W*C])
		}
	}
	if H%2 == 1 {
		off := q.gpPix(H-1) * C
		clear(gq[off : off+rw])
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

// gpOf is example j's bordered output gradient map (gsz floats) of
// implicit stage i: its part of w.gp, or in the example-major section's
// backward pass (worker.gpOne) the one map every example's go to,
// w.gp1[i] or else the first example's part of w.gp.
func (w *worker) gpOf(i, gsz, j int) []float32 {
	if w.gpOne {
		if g := w.gp1[i]; g != nil {
			return g
		}
		j = 0
	}
	return w.gp[i][j*gsz : (j+1)*gsz]
}

// gradView is example j's output gradient (the activation's derivative
// applied) of implicit stage i as the wide rows of gp: the real pixels,
// with zeros in the garbage columns.
func (w *worker) gradView(s *stage, i, j int) []float32 {
	off := s.gpPix(0) * s.fo
	return w.gpOf(i, s.gpLen(), j)[off : off+s.wide*s.fo]
}

// implicitWeightGrad writes (beta 0) or adds (beta 1) example j's weight
// gradient U_j^T G_j into M (fi x fo, rows in the internal order).
func (p *Plan) implicitWeightGrad(w *worker, i, j int, beta float32, M []float32) {
	s := &p.stages[i]
	C, fo, K := s.in.C, s.fo, s.k
	KC, lda := K*C, s.stride*C
	xp := w.xp[i][j*s.xpLen() : (j+1)*s.xpLen()]
	gw := w.gradView(s, i, j)
	// The K products share their right operand G_wide: packed once,
	// without the rows of its garbage columns (zero: the wq - W last of
	// each wide row of wq pixels), which the products then skip: the same
	// sums, bit for bit, where the input is finite (a skipped step would
	// add u 0 = ±0 to a sum that is never -0), for (wide - P)/wide fewer
	// flops.
	if p.opt.noSkipGarbage {
		blas.PackB32(gblas.NoTrans, s.wide, fo, 1, gw, fo, &w.gpk)
	} else {
		blas.PackB32Runs(s.wide, fo, s.wq, s.out.W, 1, gw, fo, &w.gpk)
	}
	if KC%implicitRows == 0 || beta != 0 {
		for kr := range K {
			w.sgemmPackedOverlapT(KC, xp[s.offX[kr]:], lda, &w.gpk, beta, M[kr*KC*fo:(kr+1)*KC*fo], fo)
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
		w.sgemmPackedOverlapT(KM, xp[s.offX[kr]:], lda, &w.gpk, 0, tmp, fo)
		copy(M[kr*KC*fo:(kr+1)*KC*fo], tmp)
	}
}
