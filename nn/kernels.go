package nn

import "math"

// im2col writes the K*K*C unfolded input of every output pixel of one
// example (input HWC) as a row of u, columns ordered (kernel row, kernel
// column, channel) so that each kernel row is one contiguous copy of K
// pixels; taps outside the input are zero. (The weight is permuted to
// match: see Plan.permuteShare.)
func (s *stage) im2col(in, u []float32) { s.unfold(in, u, false) }

// col2im adds the rows of du (gradients w.r.t. the unfolded input) back
// into the example's input gradient din (HWC), which it first clears.
func (s *stage) col2im(du, din []float32) {
	clear(din)
	s.unfold(din, du, true)
}

// unfold moves each kernel row's segment of K pixels (or the pixels of it
// inside the input) between x (HWC) and the rows of u: copies x into u,
// clearing the taps outside, or with back adds u into x.
func (s *stage) unfold(x, u []float32, back bool) { s.unfoldRows(x, u, back, 0, s.k, s.fi) }

// unfoldRows is unfold over kernel rows [kr0, kr1) only, with u's rows
// ld floats apart holding those kernel rows' columns.
func (s *stage) unfoldRows(x, u []float32, back bool, kr0, kr1, ld int) {
	C, H, W := s.in.C, s.in.H, s.in.W
	K, st, pad := s.k, s.stride, s.pad
	KC := K * C
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			row := u[(oh*OW+ow)*ld : (oh*OW+ow)*ld+(kr1-kr0)*KC]
			iw0 := ow*st - pad
			for kr := kr0; kr < kr1; kr++ {
				seg := row[(kr-kr0)*KC : (kr-kr0+1)*KC]
				ih := oh*st - pad + kr
				if ih < 0 || ih >= H {
					if !back {
						clear(seg)
					}
					continue
				}
				if iw0 >= 0 && iw0+K <= W {
					moveSeg(x[(ih*W+iw0)*C:(ih*W+iw0+K)*C], seg, back)
					continue
				}
				for kc := range K {
					iw := iw0 + kc
					if iw < 0 || iw >= W {
						if !back {
							clear(seg[kc*C : (kc+1)*C])
						}
						continue
					}
					moveSeg(x[(ih*W+iw)*C:(ih*W+iw+1)*C], seg[kc*C:(kc+1)*C], back)
				}
			}
		}
	}
}

// moveSeg copies x into seg, or with back adds seg into x.
func moveSeg(x, seg []float32, back bool) {
	if back {
		add(x, seg)
	} else {
		copy(seg, x)
	}
}

// biasAct adds the bias to every row of z (fo columns) and applies act in
// place: one pass over the GEMM's output.
func biasAct(z, bias []float32, act Activation) { biasActTo(z, z, bias, act) }

// biasActTo is biasAct writing into dst (len(z), rows of len(bias)) the
// values biasAct would leave in z; dst may be z.
func biasActTo(dst, z, bias []float32, act Activation) {
	fo := len(bias)
	z = z[:len(dst)]
	for r := 0; r < len(dst); r += fo {
		row, out := z[r:r+fo], dst[r:r+fo]
		switch act {
		case Tanh:
			biasTanhTo(out, row, bias)
		case ReLU:
			for j, b := range bias {
				out[j] = max(row[j]+b, 0)
			}
		default:
			for j, b := range bias {
				out[j] = row[j] + b
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

// fusesActGrad reports whether actGradTo handles act.
func fusesActGrad(act Activation) bool { return act == Identity || act == Tanh || act == ReLU }

// actGradTo writes into dst the gradient g w.r.t. an activation's output a
// times the activation's derivative (Identity, Tanh or ReLU): actGrad's
// values, without writing g (AVX2 on amd64, with the same roundings).
func actGradTo(dst, g, a []float32, act Activation) {
	g, a = g[:len(dst)], a[:len(dst)]
	if act == Identity {
		copy(dst, g)
		return
	}
	n := actGradToFast(dst, g, a, act == ReLU)
	actGradToGo(dst[n:], g[n:], a[n:], act)
}

// actGradToGo is actGradTo's portable loop for Tanh and ReLU.
func actGradToGo(dst, g, a []float32, act Activation) {
	switch act {
	case Tanh:
		for k, v := range a {
			dst[k] = g[k] * (1 - v*v)
		}
	case ReLU:
		for k, v := range a {
			d := float32(0)
			if v > 0 {
				d = g[k]
			}
			dst[k] = d
		}
	}
}

// tanh32 is tanh through the [15/14] Pade approximant x P(x^2)/Q(x^2)
// that truncating Lambert's continued fraction
// tanh x = x/(1 + x^2/(3 + x^2/(5 + ... + x^2/29))) gives, evaluated in
// float64 (all coefficients positive: no cancellation) on |x| <= 9.5 and
// rounded to float32; relative error below 1e-9 there (TestTanh), and
// tanh(9.5) rounds to 1 in float32. No call, no branch but the clamp, so
// the loop over a row runs at the speed of its multiplies.
func tanh32(x float32) float32 {
	const (
		p1 = 0.14942528735632185
		p2 = 0.00561941251596424
		p3 = 8.0277321656632e-05
		p4 = 4.935803703086729e-07
		p5 = 1.2820269358666827e-09
		p6 = 1.1534205450892331e-12
		p7 = 1.6154349370997664e-16
		q1 = 0.4827586206896552
		q2 = 0.033205619412515965
		q3 = 0.0007492550021285653
		q4 = 6.9806366657940875e-06
		q5 = 2.8204592589067017e-08
		q6 = 4.4983401258480094e-11
		q7 = 1.9385219245197195e-14
	)
	v := min(max(float64(x), -9.5), 9.5)
	z := v * v
	p := ((((((p7*z+p6)*z+p5)*z+p4)*z+p3)*z+p2)*z+p1)*z + 1
	q := ((((((q7*z+q6)*z+q5)*z+q4)*z+q3)*z+q2)*z+q1)*z + 1
	return float32(v * p / q)
}

// maxPool pools one example (HWC) into out, whose rows are ost floats
// apart, storing the index into in of each output's maximum in arg.
func (s *stage) maxPool(in, out []float32, ost int, arg []int32) {
	if !s.maxPool2Fast(in, out, ost, arg) {
		s.maxPoolLoop(in, out, ost, arg)
	}
}

// maxPoolLoop is maxPool's portable loop: the first maximum of each window
// wins ties, and a NaN only if it comes first.
func (s *stage) maxPoolLoop(in, out []float32, ost int, arg []int32) {
	C, W := s.in.C, s.in.W
	S := s.pool
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			o, x := (oh*OW+ow)*C, oh*ost+ow*C
			out := out[x : x+C]
			base := (oh*S*W + ow*S) * C
			copy(out, in[base:base+C])
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
						if v > out[ch] {
							out[ch] = v
							arg[o+ch] = int32(b + ch)
						}
					}
				}
			}
		}
	}
}

// sumsq64Go is the squared L2 norm of v accumulated in float64: each
// product of two float32 values is exact in float64, so the only error is
// the float64 summation. Term k of the first len(v) &^ 15 goes to partial
// sum k mod 32 (sumsqLanes), the partial sums are added by total, then
// the rest of v in order: the order of sumsq64's kernels. The bound
// docs/math.md §9.4 uses does not depend on that order: adding n
// nonnegative exact squares in any tree of float64 additions rounds each
// term at most n-1 times (relative 2^-53 each), so the sum is within
// γ = (n-1)·2^-53/(1 - (n-1)·2^-53) relative of ‖v‖², and for n ≤ 2^32
// its rounded square root within γ/2 + 2^-53 + γ·2^-53 ≤ (n+2)·2^-53 of
// ‖v‖. The order only fixes the last bits (and
// makes a vector's norm the same bits on every machine and path).
func sumsq64Go(v []float32) float64 {
	var acc sumsqLanes
	n := len(v) &^ 15
	acc.addGo(v[:n])
	return acc.finish(v[n:])
}

// sumsq64 is sumsq64Go with the partial sums added by sumsqLanes.add
// (AVX-512 or AVX2 where available), the same values.
func sumsq64(v []float32) float64 {
	var acc sumsqLanes
	n := len(v) &^ 15
	acc.add(v[:n])
	return acc.finish(v[n:])
}

// sumsqLanes are sumsq64's 32 partial sums, for a vector whose squared
// norm is taken piece by piece (a per-example gradient computed in
// panels that are never all in memory at once): adding pieces of
// multiples of 16 floats in order, then total, gives sumsq64 of their
// concatenation bit for bit (odd records where the next 16 go). 32 sums,
// not fewer: each is a chain of dependent additions (4 cycles each), and
// the kernels must keep enough of them in flight to run at the
// conversions' and multiply-adds' throughput (AVX-512: four vectors of 8,
// each used twice a 64-float step; AVX2: eight vectors of 4).
type sumsqLanes struct {
	s   [32]float64
	odd bool // an odd number of 16-float blocks added: the next goes to s[16:]
}

// addGo adds the squares of v (len(v) a multiple of 16): term k of the
// pieces added so far, v's included, to partial sum k mod 32.
func (acc *sumsqLanes) addGo(v []float32) {
	for ; len(v) >= 16; v = v[16:] {
		s := acc.s[:16]
		if acc.odd {
			s = acc.s[16:]
		}
		for l, x := range v[:16] {
			s[l] += float64(x) * float64(x)
		}
		acc.odd = !acc.odd
	}
}

// total adds the partial sums as four vectors of eight lanes (pairwise),
// then the eight lanes pairwise: sumsq64's order.
func (acc *sumsqLanes) total() float64 {
	var t [8]float64
	for l := range t {
		t[l] = (acc.s[l] + acc.s[8+l]) + (acc.s[16+l] + acc.s[24+l])
	}
	return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
}

// finish is total, then the squares of the rest of the vector (fewer than
// 16 floats) added in order.
func (acc *sumsqLanes) finish(rest []float32) float64 {
	s := acc.total()
	for _, x := range rest {
		s += float64(x) * float64(x)
	}
	return s
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

// allFiniteGo reports whether every v_k is finite.
func allFiniteGo(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}

// FirstNonFinite is the index of the first value of v that is NaN or
// infinite, or -1 if all are finite. It scans blocks with the vector
// kernel where the CPU has one (a model's parameters are checked so
// before every step, on the caller's goroutine).
func FirstNonFinite(v []float32) int {
	const block = 1024
	for k := 0; k < len(v); k += block {
		b := v[k:min(k+block, len(v))]
		if allFinite(b) {
			continue
		}
		for i, x := range b {
			if x-x != 0 {
				return k + i
			}
		}
	}
	return -1
}
