package nn

import "math"

// paramIndex is the affine parameter of element (pixel k, channel c) of a
// norm stage: c for GroupNorm, c*HW+k (CHW order) for LayerNorm.
func (s *stage) paramIndex(k, c, hw int) int {
	if s.perElem {
		return c*hw + k
	}
	return c
}

// normForward normalizes one example (HWC) per group in float64
// statistics, keeps xhat and 1/sqrt(var+eps), and applies the affine.
func (s *stage) normForward(params, in, out, xh []float32, rstd []float64) {
	C, HW := s.in.C, s.in.H*s.in.W
	Cg := C / s.groups
	gamma := params[s.w.Offset : s.w.Offset+s.w.Len]
	beta := params[s.b.Offset : s.b.Offset+s.b.Len]
	N := float64(HW * Cg)
	for g := range s.groups {
		c0, c1 := g*Cg, (g+1)*Cg
		mean := 0.0
		for k := range HW {
			for _, v := range in[k*C+c0 : k*C+c1] {
				mean += float64(v)
			}
		}
		mean /= N
		vr := 0.0
		for k := range HW {
			for _, v := range in[k*C+c0 : k*C+c1] {
				d := float64(v) - mean
				vr += d * d
			}
		}
		r := 1 / math.Sqrt(vr/N+s.eps)
		rstd[g] = r
		for k := range HW {
			for c := c0; c < c1; c++ {
				x := float32((float64(in[k*C+c]) - mean) * r)
				xh[k*C+c] = x
				q := s.paramIndex(k, c, HW)
				out[k*C+c] = gamma[q]*x + beta[q]
			}
		}
	}
}

// normBack writes the gradient w.r.t. one example's input:
// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) per group, with
// dxhat = dy * gamma.
func (s *stage) normBack(params, dy, dx, xh []float32, rstd []float64) {
	C, HW := s.in.C, s.in.H*s.in.W
	Cg := C / s.groups
	gamma := params[s.w.Offset : s.w.Offset+s.w.Len]
	N := float64(HW * Cg)
	for g := range s.groups {
		c0, c1 := g*Cg, (g+1)*Cg
		s1, s2 := 0.0, 0.0
		for k := range HW {
			for c := c0; c < c1; c++ {
				d := float64(dy[k*C+c]) * float64(gamma[s.paramIndex(k, c, HW)])
				s1 += d
				s2 += d * float64(xh[k*C+c])
			}
		}
		s1 /= N
		s2 /= N
		r := rstd[g]
		for k := range HW {
			for c := c0; c < c1; c++ {
				d := float64(dy[k*C+c]) * float64(gamma[s.paramIndex(k, c, HW)])
				dx[k*C+c] = float32(r * (d - s1 - float64(xh[k*C+c])*s2))
			}
		}
	}
}

// normGrad writes one example's gradient w.r.t. the affine parameters
// into M (weight then bias, parameter order): sums over pixels in float64
// for GroupNorm, products for LayerNorm.
func (s *stage) normGrad(dy, xh []float32, M []float32, acc []float64) {
	C, HW := s.in.C, s.in.H*s.in.W
	A := s.w.Len
	dg, db := M[:A], M[A:A+s.b.Len]
	if s.perElem {
		for k := range HW {
			for c := range C {
				q := c*HW + k
				dg[q] = dy[k*C+c] * xh[k*C+c]
				db[q] = dy[k*C+c]
			}
		}
		return
	}
	acc = acc[:2*C]
	clear(acc)
	for k := range HW {
		for c := range C {
			acc[c] += float64(dy[k*C+c]) * float64(xh[k*C+c])
			acc[C+c] += float64(dy[k*C+c])
		}
	}
	for c := range C {
		dg[c], db[c] = float32(acc[c]), float32(acc[C+c])
	}
}

// avgPool averages one example's S x S windows (HWC).
func (s *stage) avgPool(in, out []float32) {
	C, W, S := s.in.C, s.in.W, s.pool
	inv := 1 / float32(S*S)
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			o := out[(oh*OW+ow)*C : (oh*OW+ow+1)*C]
			clear(o)
			for dr := range S {
				for dc := range S {
					b := ((oh*S+dr)*W + ow*S + dc) * C
					add(o, in[b:b+C])
				}
			}
			for c := range o {
				o[c] *= inv
			}
		}
	}
}

// avgPoolBack spreads each output gradient evenly over its window.
func (s *stage) avgPoolBack(dout, din []float32) {
	clear(din)
	C, W, S := s.in.C, s.in.W, s.pool
	inv := 1 / float32(S*S)
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			g := dout[(oh*OW+ow)*C : (oh*OW+ow+1)*C]
			for dr := range S {
				for dc := range S {
					b := ((oh*S+dr)*W + ow*S + dc) * C
					axpy(inv, g, din[b:b+C])
				}
			}
		}
	}
}

// biasAct adds stage i's bias to the GEMM output z and applies its
// activation, keeping the pre-activation for GELU.
func (p *Plan) biasAct(w *worker, i int, z []float32) {
	s := &p.stages[i]
	bias := p.params[s.b.Offset : s.b.Offset+s.b.Len]
	if s.act != GELU {
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
	if s.act != GELU {
		actGrad(G, w.act[i+1][:len(G)], s.act)
		return
	}
	for k, v := range w.pre[i][:len(G)] {
		x := float64(v)
		d := 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
		G[k] = float32(float64(G[k]) * d)
	}
}
