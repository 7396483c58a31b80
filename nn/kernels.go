package nn

import "math"

// im2col writes the K*K*C unfolded input of every output pixel of one
// example (input HWC) as a row of u, columns ordered (channel, kernel row,
// kernel column); taps outside the input are zero.
func (s *stage) im2col(in, u []float32) {
	C, H, W := s.in.C, s.in.H, s.in.W
	K, KK, st, pad := s.k, s.k*s.k, s.stride, s.pad
	OW := s.out.W
	fi := s.fi
	for oh := range s.out.H {
		for ow := range OW {
			row := u[(oh*OW+ow)*fi : (oh*OW+ow+1)*fi]
			for kr := range K {
				ih := oh*st - pad + kr
				for kc := range K {
					iw := ow*st - pad + kc
					col := row[kr*K+kc:]
					if ih < 0 || ih >= H || iw < 0 || iw >= W {
						for ch := range C {
							col[ch*KK] = 0
						}
						continue
					}
					src := in[(ih*W+iw)*C : (ih*W+iw+1)*C]
					for ch, v := range src {
						col[ch*KK] = v
					}
				}
			}
		}
	}
}

// col2im adds the rows of du (gradients w.r.t. the unfolded input) back
// into the example's input gradient din (HWC), which it first clears.
func (s *stage) col2im(du, din []float32) {
	clear(din)
	C, H, W := s.in.C, s.in.H, s.in.W
	K, KK, st, pad := s.k, s.k*s.k, s.stride, s.pad
	OW := s.out.W
	fi := s.fi
	for oh := range s.out.H {
		for ow := range OW {
			row := du[(oh*OW+ow)*fi : (oh*OW+ow+1)*fi]
			for kr := range K {
				ih := oh*st - pad + kr
				if ih < 0 || ih >= H {
					continue
				}
				for kc := range K {
					iw := ow*st - pad + kc
					if iw < 0 || iw >= W {
						continue
					}
					col := row[kr*K+kc:]
					dst := din[(ih*W+iw)*C : (ih*W+iw+1)*C]
					for ch := range dst {
						dst[ch] += col[ch*KK]
					}
				}
			}
		}
	}
}

// biasAct adds the bias to every row of z (fo columns) and applies act in
// place: one pass over the GEMM's output.
func biasAct(z, bias []float32, act Activation) {
	fo := len(bias)
	for r := 0; r < len(z); r += fo {
		row := z[r : r+fo]
		switch act {
		case Tanh:
			for j, b := range bias {
				row[j] = tanh32(row[j] + b)
			}
		case ReLU:
			for j, b := range bias {
				row[j] = max(row[j]+b, 0)
			}
		default:
			for j, b := range bias {
				row[j] += b
			}
		}
	}
}

// actGrad multiplies the gradient g w.r.t. an activation's output a by the
// activation's derivative, expressed through a, in place.
func actGrad(g, a []float32, act Activation) {
	switch act {
	case Tanh:
		for k, v := range a {
			g[k] *= 1 - v*v
		}
	case ReLU:
		for k, v := range a {
			if !(v > 0) {
				g[k] = 0
			}
		}
	}
}

// tanh32 is tanh computed in float64 as 1 - 2/(exp(2|x|)+1) (relative
// error below 1e-12 for |x| >= 1e-4, where the cancellation is mild; x
// itself below, where tanh x = x(1 - x^2/3 + ...)), rounded to float32.
func tanh32(x float32) float32 {
	ax := math.Abs(float64(x))
	switch {
	case ax < 1e-4:
		return x
	case ax > 10:
		return float32(math.Copysign(1, float64(x)))
	case ax != ax:
		return x
	}
	t := 1 - 2/(math.Exp(2*ax)+1)
	return float32(math.Copysign(t, float64(x)))
}

// maxPool pools one example (HWC) into out, storing the index into in of
// each output's maximum in arg.
func (s *stage) maxPool(in, out []float32, arg []int32) {
	C, W := s.in.C, s.in.W
	S := s.pool
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			o := (oh*OW + ow) * C
			base := (oh*S*W + ow*S) * C
			copy(out[o:o+C], in[base:base+C])
			for ch := range C {
				arg[o+ch] = int32(base + ch)
			}
			for dr := range S {
				for dc := range S {
					if dr == 0 && dc == 0 {
						continue
					}
					b := ((oh*S+dr)*W + ow*S + dc) * C
					src := in[b : b+C]
					for ch, v := range src {
						if v > out[o+ch] {
							out[o+ch] = v
							arg[o+ch] = int32(b + ch)
						}
					}
				}
			}
		}
	}
}

// sumsq64 is the squared L2 norm of v accumulated in float64: each
// product of two float32 values is exact in float64, so the only error is
// the float64 summation (relative 1e-16 per term).
func sumsq64(v []float32) float64 {
	var s0, s1, s2, s3 float64
	k := 0
	for ; k+4 <= len(v); k += 4 {
		a, b, c, d := float64(v[k]), float64(v[k+1]), float64(v[k+2]), float64(v[k+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; k < len(v); k++ {
		a := float64(v[k])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

// maxAbs is max |v_k|, NaN if any v_k is NaN.
func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		a := math.Abs(float64(x))
		if a > m || a != a {
			m = a
		}
		if m != m {
			return m
		}
	}
	return m
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}

// axpy adds a*x to y.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	k := 0
	for ; k+4 <= len(x); k += 4 {
		y[k] += a * x[k]
		y[k+1] += a * x[k+1]
		y[k+2] += a * x[k+2]
		y[k+3] += a * x[k+3]
	}
	for ; k < len(x); k++ {
		y[k] += a * x[k]
	}
}
