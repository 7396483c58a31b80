package nn

import "math"

// GroupNorm and LayerNorm run on one example (HWC) in passes over its
// rows of C channels. Forward: each channel's sums of x - K_c and
// (x - K_c)^2 in float64, K_c the channel's first value (so that a mean
// far from zero does not cancel), combined into each group's mean and
// 1/sqrt(var+eps); then xhat, the affine and a ReLU in one pass.
// Backward: the ReLU mask and each channel's sums of dy xhat and dy in
// one pass (for GroupNorm these are the affine gradient, and through
// gamma the group sums the input gradient needs), then the input
// gradient in another. The passes are the kernels chanStats, normApply,
// normSums and normDx (AVX2 on amd64, vec_amd64.s; the loops below
// elsewhere and for the channels left over, with the same roundings).
// LayerNorm over a map (H*W > 1, an affine per element) takes the plain
// loops of layerNormApply and layerNormBack.

// normIO is where a fused norm's rows go for one example (fuseNorms): its
// output rows into the bordered map xp of its reader r (nil: into its
// activation), and its input gradient's rows into the bordered map gp of
// its producer q (nil: into dx).
type normIO struct {
	r, q   *stage
	xp, gp []float32
}

// normIO is stage s's normIO for example j.
func (p *Plan) normIO(w *worker, s *stage, j int) normIO {
	var io normIO
	if s.xpFilledBy() {
		io.r = &p.stages[s.normTo]
		io.xp = w.xp[s.normTo][j*io.r.xpLen() : (j+1)*io.r.xpLen()]
	}
	if s.gradToGp {
		io.q = &p.stages[s.src-1]
		io.gp = w.gpOf(s.src-1, io.q.gpLen(), j)
	}
	return io
}

// xpFilledBy reports whether the norm s writes its reader's bordered map.
func (s *stage) xpFilledBy() bool { return s.kind == kNorm && s.normTo > 0 }

// fuseNorms marks the GroupNorms (and LayerNorms of one pixel) whose
// passes go straight into the implicit convolutions around them: a norm
// whose output only an implicit convolution reads writes it into that
// convolution's bordered map (the values normApply writes, row by row,
// and the ReLU mask of its backward read back from there), and a norm
// whose input only it reads, made by an implicit convolution without an
// activation, writes its input gradient into that convolution's bordered
// output gradient. This saves, per example and norm, a copy of the map
// and a write and read of each of the two.
func (p *Plan) fuseNorms() {
	readers, reader := p.readers()
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind != kNorm || s.perElem && s.in.H*s.in.W > 1 {
			continue
		}
		if s.act == Identity || s.act == ReLU {
			if r := &p.stages[reader[i+1]]; readers[i+1] == 1 && r.kind == kConv && r.implicit {
				s.normTo, r.xpFilled = reader[i+1], true
			}
		}
		if s.src == 0 || readers[s.src] != 1 {
			continue
		}
		if q := &p.stages[s.src-1]; q.kind == kConv && q.implicit && q.act == Identity && !q.gpFilled {
			s.gradToGp, q.gpFilled = true, true
		}
	}
}

// normScratch is the float64 scratch normForward and normBackward need
// for a stage with C input channels.
func normScratch(C int) int { return 3 * C }

// normForward normalizes one example, keeps xhat (xh) and each group's
// 1/sqrt(var+eps) (rstd), and writes the affine output, with the ReLU
// applied if that is the stage's activation (others are the caller's),
// into out or, fused, into its reader's bordered map.
// buf holds normScratch(C) values.
func (s *stage) normForward(params, in, out, xh []float32, rstd, buf []float64, io normIO) {
	C, HW := s.in.C, s.in.H*s.in.W
	gamma := params[s.w.Offset : s.w.Offset+s.w.Len]
	beta := params[s.b.Offset : s.b.Offset+s.b.Len]
	mean, r := s.normStats(in, rstd, buf)
	relu := s.act == ReLU
	if s.perElem && HW > 1 {
		s.layerNormApply(in, out, xh, mean[0], r[0], gamma, beta, relu)
		return
	}
	if io.r == nil {
		normApply(in, out, xh, C, mean, r, gamma, beta, relu)
		return
	}
	// Row by row into the reader's bordered map: each entry's value is
	// normApply's on the whole map.
	rw := s.in.W * C
	for h := range s.in.H {
		o := io.r.xpPix(h) * C
		normApply(in[h*rw:(h+1)*rw], io.xp[o:o+rw], xh[h*rw:(h+1)*rw], C, mean, r, gamma, beta, relu)
	}
}

// normStats sets rstd[g] for every group and returns each channel's
// group mean and group 1/sqrt(var+eps) (in buf).
func (s *stage) normStats(in []float32, rstd, buf []float64) (mean, r []float64) {
	C, HW := s.in.C, s.in.H*s.in.W
	Cg := C / s.groups
	shift, s1, s2 := buf[:C], buf[C:2*C], buf[2*C:3*C]
	for c, v := range in[:C] {
		shift[c] = float64(v)
	}
	clear(s1)
	clear(s2)
	chanStats(in[:HW*C], C, shift, s1, s2)
	n, N := float64(HW), float64(HW*Cg)
	for g := range s.groups {
		c0, c1 := g*Cg, (g+1)*Cg
		sum := 0.0
		for c := c0; c < c1; c++ {
			sum += s1[c] + n*shift[c]
		}
		m := sum / N
		// sum_k (x - m)^2 = s2 + 2 (K - m) s1 + n (K - m)^2 per channel.
		vr := 0.0
		for c := c0; c < c1; c++ {
			e := shift[c] - m
			vr += s2[c] + 2*e*s1[c] + n*e*e
		}
		rg := 1 / math.Sqrt(max(vr/N, 0)+s.eps)
		rstd[g] = rg
		for c := c0; c < c1; c++ {
			s1[c], s2[c] = m, rg
		}
	}
	return s1, s2
}

// layerNormApply is normApply for LayerNorm over a map: one group, the
// affine per element in CHW order.
func (s *stage) layerNormApply(in, out, xh []float32, mean, r float64, gamma, beta []float32, relu bool) {
	C, HW := s.in.C, s.in.H*s.in.W
	for k := range HW {
		for c := range C {
			x := float32((float64(in[k*C+c]) - mean) * r)
			xh[k*C+c] = x
			q := c*HW + k
			o := float32(gamma[q]*x) + beta[q]
			if relu {
				o = max(o, 0)
			}
			out[k*C+c] = o
		}
	}
}

// normBackward takes dy, the gradient w.r.t. one example's output of
// the stage (out), and first applies the ReLU's derivative to it in place
// if that is the stage's activation (others are the caller's), leaving
// the gradient w.r.t. the affine output. It writes the gradient w.r.t.
// the affine parameters into M (weight, then bias) and, unless dx is nil,
// the gradient w.r.t. the input into dx:
// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) per group, with
// dxhat = dy gamma. buf holds normScratch(C) values. Fused (io), the ReLU's
// mask is read from the reader's bordered map and dx written into the
// producer's bordered output gradient, row by row: the sums take the
// rows in the same order, so the values are the unfused ones bit for bit.
func (s *stage) normBackward(params, dy, out, dx, xh []float32, rstd []float64, M []float32, buf []float64, io normIO) {
	C, HW := s.in.C, s.in.H*s.in.W
	gamma := params[s.w.Offset : s.w.Offset+s.w.Len]
	var act []float32
	if s.act == ReLU {
		act = out
	}
	dg, db := M[:s.w.Len], M[s.w.Len:s.w.Len+s.b.Len]
	if s.perElem && HW > 1 {
		s.layerNormBack(gamma, dy, act, dx, xh, rstd[0], dg, db)
		return
	}
	sa, sb := buf[:C], buf[C:2*C]
	clear(sa)
	clear(sb)
	rw := s.in.W * C
	if io.r != nil && act != nil {
		for h := range s.in.H {
			o := io.r.xpPix(h) * C
			normSums(dy[h*rw:(h+1)*rw], io.xp[o:o+rw], xh[h*rw:(h+1)*rw], C, sa, sb)
		}
	} else {
		normSums(dy[:HW*C], act, xh, C, sa, sb)
	}
	for c := range C {
		dg[c], db[c] = float32(sa[c]), float32(sb[c])
	}
	if dx == nil && io.q == nil {
		return
	}
	// dx = a_c dy + b_c xhat + e_c, with the group sums through gamma;
	// a, b and e overwrite sa, sb and buf[2C:] group by group.
	Cg := C / s.groups
	N := float64(HW * Cg)
	a, b, e := buf[:C], buf[C:2*C], buf[2*C:3*C]
	for g := range s.groups {
		c0, c1 := g*Cg, (g+1)*Cg
		s1, s2 := 0.0, 0.0
		for c := c0; c < c1; c++ {
			s1 += float64(gamma[c]) * sb[c]
			s2 += float64(gamma[c]) * sa[c]
		}
		r := rstd[g]
		s1, s2 = -r*s1/N, -r*s2/N
		for c := c0; c < c1; c++ {
			a[c], b[c], e[c] = r*float64(gamma[c]), s2, s1
		}
	}
	if io.q == nil {
		normDx(dy[:HW*C], xh, dx, C, a, b, e)
		return
	}
	for h := range s.in.H {
		o := io.q.gpPix(h) * C
		normDx(dy[h*rw:(h+1)*rw], xh[h*rw:(h+1)*rw], io.gp[o:o+rw], C, a, b, e)
	}
}

// layerNormBack is normBackward for LayerNorm over a map.
func (s *stage) layerNormBack(gamma, dy, act, dx, xh []float32, r float64, dg, db []float32) {
	C, HW := s.in.C, s.in.H*s.in.W
	s1, s2 := 0.0, 0.0
	for k := range HW {
		for c := range C {
			g := dy[k*C+c]
			if act != nil && !(act[k*C+c] > 0) {
				g = 0
				dy[k*C+c] = 0
			}
			q := c*HW + k
			dg[q], db[q] = g*xh[k*C+c], g
			d := float64(g) * float64(gamma[q])
			s1 += d
			s2 += d * float64(xh[k*C+c])
		}
	}
	if dx == nil {
		return
	}
	N := float64(HW * C)
	s1 /= N
	s2 /= N
	for k := range HW {
		for c := range C {
			d := float64(dy[k*C+c]) * float64(gamma[c*HW+k])
			dx[k*C+c] = float32(r * (d - s1 - float64(xh[k*C+c])*s2))
		}
	}
}

// The portable norm kernels: rows of C channels, channels [c0, C) of
// each. The AVX2 versions compute the same values with the same
// roundings (no fused multiply-add where it would round differently).

// chanStatsGo adds each channel's x - shift[c] to s1[c] and its square to
// s2[c] (float64).
func chanStatsGo(x []float32, C, c0 int, shift, s1, s2 []float64) {
	for r := 0; r < len(x); r += C {
		for c := c0; c < C; c++ {
			d := float64(x[r+c]) - shift[c]
			s1[c] += d
			s2[c] += float64(d * d)
		}
	}
}

// normApplyGo writes xhat = (x - mean_c) r_c (rounded to float32) and
// gamma_c xhat + beta_c, through max(., 0) if relu.
func normApplyGo(in, out, xh []float32, C, c0 int, mean, r []float64, gamma, beta []float32, relu bool) {
	for k := 0; k < len(in); k += C {
		for c := c0; c < C; c++ {
			x := float32((float64(in[k+c]) - mean[c]) * r[c])
			xh[k+c] = x
			o := float32(gamma[c]*x) + beta[c]
			if relu {
				o = max(o, 0)
			}
			out[k+c] = o
		}
	}
}

// normSumsGo zeroes dy where act (if not nil) is not positive, then adds
// each channel's dy xhat to sa[c] and dy to sb[c] (float64; the products
// of two float32 values are exact).
func normSumsGo(dy, act, xh []float32, C, c0 int, sa, sb []float64) {
	for k := 0; k < len(dy); k += C {
		for c := c0; c < C; c++ {
			g := dy[k+c]
			if act != nil && !(act[k+c] > 0) {
				g = 0
				dy[k+c] = 0
			}
			sa[c] += float64(g) * float64(xh[k+c])
			sb[c] += float64(g)
		}
	}
}

// chanSumsGo adds each channel's values to s[c] (float64).
func chanSumsGo(x []float32, C, c0 int, s []float64) {
	for k := 0; k < len(x); k += C {
		for c := c0; c < C; c++ {
			s[c] += float64(x[k+c])
		}
	}
}

// normDxGo writes dx = a_c dy + b_c xhat + e_c, in float64 rounded to
// float32.
func normDxGo(dy, xh, dx []float32, C, c0 int, a, b, e []float64) {
	for k := 0; k < len(dy); k += C {
		for c := c0; c < C; c++ {
			dx[k+c] = float32(float64(a[c]*float64(dy[k+c])) + float64(b[c]*float64(xh[k+c])) + e[c])
		}
	}
}

// avgPool averages one example's S x S windows (HWC).
func (s *stage) avgPool(in, out []float32) {
	C := s.in.C
	inv := 1 / float32(s.pool*s.pool)
	s.poolWindows(func(o, b int) {
		add(out[o:o+C], in[b:b+C])
	}, func(o int) {
		clear(out[o : o+C])
	}, func(o int) {
		for c := range C {
			out[o+c] *= inv
		}
	})
}

// avgPoolBack spreads each output gradient evenly over its window.
func (s *stage) avgPoolBack(dout, din []float32) {
	clear(din)
	C := s.in.C
	inv := 1 / float32(s.pool*s.pool)
	s.poolWindows(func(o, b int) {
		axpy(inv, dout[o:o+C], din[b:b+C])
	}, nil, nil)
}

// poolWindows visits the non-overlapping S x S windows of a pooling stage
// (HWC): for each output pixel at offset o, begin(o), then tap(o, b) for
// the offset b of each input pixel of its window, then end(o) (begin and
// end may be nil).
func (s *stage) poolWindows(tap func(o, b int), begin, end func(o int)) {
	C, W, S := s.in.C, s.in.W, s.pool
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			o := (oh*OW + ow) * C
			if begin != nil {
				begin(o)
			}
			for dr := range S {
				for dc := range S {
					tap(o, ((oh*S+dr)*W+ow*S+dc)*C)
				}
			}
			if end != nil {
				end(o)
			}
		}
	}
}

// biasAct adds stage i's bias to the GEMM output z and applies its
// activation, keeping the pre-activation for GELU.
func (p *Plan) biasAct(w *worker, i int, z []float32) {
	s := &p.stages[i]
	bias := p.params[s.b.Offset : s.b.Offset+s.b.Len]
	if s.noBias != nil {
		bias = s.noBias
	}
	if s.act <= ReLU {
		biasAct(z, bias, s.act)
		return
	}
	biasAct(z, bias, Identity)
	p.activate(w, i, z)
}

// activate applies stage i's activation to z in place (keeping the
// pre-activation for GELU).
func (p *Plan) activate(w *worker, i int, z []float32) {
	s := &p.stages[i]
	switch s.act {
	case Tanh:
		for k, v := range z {
			z[k] = tanh32(v)
		}
		return
	case ReLU:
		for k, v := range z {
			z[k] = max(v, 0)
		}
		return
	case Identity:
		return
	case Sigmoid:
		for k, v := range z {
			z[k] = float32(1 / (1 + math.Exp(-float64(v))))
		}
		return
	case LeakyReLU:
		for k, v := range z {
			if v < 0 {
				z[k] = v * s.slope
			}
		}
		return
	}
	copy(w.pre[i], z)
	for k, v := range z {
		x := float64(v)
		z[k] = float32(0.5 * x * (1 + math.Erf(x/math.Sqrt2)))
	}
}

// actGrad multiplies the gradient G w.r.t. stage i's output by the
// activation's derivative.
func (p *Plan) actGrad(w *worker, i int, G []float32) {
	s := &p.stages[i]
	switch s.act {
	case GELU:
	case Sigmoid: // a(1-a), a the output
		for k, v := range w.act[i+1][:len(G)] {
			G[k] *= v * (1 - v)
		}
		return
	case LeakyReLU: // the output's sign is the input's (0 < slope)
		for k, v := range w.act[i+1][:len(G)] {
			if v < 0 {
				G[k] *= s.slope
			}
		}
		return
	default:
		actGrad(G, w.act[i+1][:len(G)], s.act)
		return
	}
	for k, v := range w.pre[i][:len(G)] {
		x := float64(v)
		d := 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
		G[k] = float32(float64(G[k]) * d)
	}
}
