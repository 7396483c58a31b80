//go:build amd64 && !purego

package nn

import "golang.org/x/sys/cpu"

// hasAVX2FMA and hasAVX512 are fixed at start-up by the CPU.
var (
	hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512  = hasAVX2FMA && cpu.X86.HasAVX512F
)

//go:noescape
func biasTanhAVX2(dst, z, bias *float32, n int)

//go:noescape
func biasTanhAVX512(dst, z, bias *float32, n int)

// biasTanh sets z[j] = tanh(z[j] + bias[j]), eight at a time with AVX2
// (the same approximant as tanh32, in float32 arithmetic: relative error
// below 1e-6) and the rest with tanh32.
func biasTanh(z, bias []float32) { biasTanhTo(z, z, bias) }

// biasTanhTo sets dst[j] = tanh(z[j] + bias[j]) with biasTanh's
// arithmetic (dst may be z): sixteen at a time with AVX-512 where the
// CPU has it (the AVX2 kernel's operations on every lane, the same
// bits).
func biasTanhTo(dst, z, bias []float32) {
	dst, z = dst[:len(bias)], z[:len(bias)]
	n := 0
	if hasAVX512 {
		if n = len(bias) &^ 15; n > 0 {
			biasTanhAVX512(&dst[0], &z[0], &bias[0], n)
		}
	}
	if hasAVX2FMA {
		if m := (len(bias) - n) &^ 7; m > 0 {
			biasTanhAVX2(&dst[n], &z[n], &bias[n], m)
			n += m
		}
	}
	for j := n; j < len(bias); j++ {
		dst[j] = tanh32(z[j] + bias[j])
	}
}

//go:noescape
func addAVX2(y, x *float32, n int)

//go:noescape
func axpyAVX2(a float32, x, y *float32, n int)

// add adds x to y (len(y) <= len(x)).
func add(y, x []float32) {
	x = x[:len(y)]
	n := 0
	if hasAVX2FMA {
		if n = len(y) &^ 7; n > 0 {
			addAVX2(&y[0], &x[0], n)
		}
	}
	for k := n; k < len(y); k++ {
		y[k] += x[k]
	}
}

//go:noescape
func addToAVX2(z, x, y *float32, n int)

//go:noescape
func addToAVX512(z, x, y *float32, n int)

// addTo sets z = x + y (len(x), len(y) >= len(z)).
func addTo(z, x, y []float32) {
	x, y = x[:len(z)], y[:len(z)]
	n := 0
	if hasAVX512 {
		if n = len(z) &^ 15; n > 0 {
			addToAVX512(&z[0], &x[0], &y[0], n)
		}
	} else if hasAVX2FMA {
		if n = len(z) &^ 7; n > 0 {
			addToAVX2(&z[0], &x[0], &y[0], n)
		}
	}
	for k := n; k < len(z); k++ {
		z[k] = x[k] + y[k]
	}
}

// axpy adds a*x to y (len(y) >= len(x)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	n := 0
	if hasAVX2FMA {
		if n = len(x) &^ 7; n > 0 {
			axpyAVX2(a, &x[0], &y[0], n)
		}
	}
	for k := n; k < len(x); k++ {
		y[k] += a * x[k]
	}
}

//go:noescape
func max4AVX2(in *float32, c, wc int, out *float32, arg *int32, base int32, ow int)

// maxPool2Fast pools one example with 2x2 windows eight channels at a
// time, a row of outputs per call, if it can, reporting whether it did.
func (s *stage) maxPool2Fast(in, out []float32, ost int, arg []int32) bool {
	C, W := s.in.C, s.in.W
	OW := s.out.W
	if !hasAVX2FMA || s.pool != 2 || C%8 != 0 || OW == 0 {
		return false
	}
	for oh := range s.out.H {
		o, x, base := oh*OW*C, oh*ost, oh*2*W*C
		_, _, _ = in[base+W*C+2*OW*C-1], out[x+OW*C-1], arg[o+OW*C-1]
		max4AVX2(&in[base], C, W*C, &out[x], &arg[o], int32(base), OW)
	}
	return true
}

//go:noescape
func chanStatsAVX2(x *float32, rows, c, c4 int, shift, s1, s2 *float64)

//go:noescape
func normApplyAVX2(in, out, xh *float32, rows, c, c4 int, mean, r *float64, gamma, beta *float32, relu int)

//go:noescape
func normSumsAVX2(dy, act, xh *float32, rows, c, c4 int, sa, sb *float64, relu int)

//go:noescape
func normDxAVX2(dy, xh, dx *float32, rows, c, c4 int, a, b, e *float64)

//go:noescape
func chanStatsAVX512(x *float32, rows, c, c8 int, shift, s1, s2 *float64)

//go:noescape
func normApplyAVX512(in, out, xh *float32, rows, c, c8 int, mean, r *float64, gamma, beta *float32, relu int)

//go:noescape
func normSumsAVX512(dy, act, xh *float32, rows, c, c8 int, sa, sb *float64, relu int)

//go:noescape
func normDxAVX512(dy, xh, dx *float32, rows, c, c8 int, a, b, e *float64)

//go:noescape
func chanSumsAVX2(x *float32, rows, c, c4 int, s *float64)

//go:noescape
func chanSumsAVX512(x *float32, rows, c, c64 int, s *float64)

//go:noescape
func sumsqLanesAVX2(acc *[32]float64, v *float32, n int)

//go:noescape
func sumsqLanesAVX512(acc *[32]float64, v *float32, n int)

// add adds the squares of v (len(v) a multiple of 16) to the partial
// sums with AVX-512 or AVX2 (addGo's values): a block that goes to
// s[16:] first with addGo, then the kernel from partial sum 0.
func (acc *sumsqLanes) add(v []float32) {
	if acc.odd && len(v) >= 16 {
		acc.addGo(v[:16])
		v = v[16:]
	}
	n := len(v) &^ 15
	switch {
	case n == 0:
		return
	case hasAVX512:
		sumsqLanesAVX512(&acc.s, &v[0], n)
	case hasAVX2FMA:
		sumsqLanesAVX2(&acc.s, &v[0], n)
	default:
		acc.addGo(v)
		return
	}
	acc.odd = n%32 != 0
}

// wide512 reports whether the norm kernels take all C channels 8 at a
// time with AVX-512 (the AVX2 kernels' operations on twice the lanes).
func wide512(C int) bool { return hasAVX512 && C%8 == 0 }

// vecChannels is how many of C channels the AVX2 norm kernels take (a
// multiple of 4), 0 without AVX2 or with fewer than 4.
func vecChannels(C int) int {
	if !hasAVX2FMA {
		return 0
	}
	return C &^ 3
}

// chanStats adds each channel's x - shift[c] to s1[c] and its square to
// s2[c] over the rows of C channels of x (float64).
func chanStats(x []float32, C int, shift, s1, s2 []float64) {
	c4 := vecChannels(C)
	if c4 > 0 && len(x) > 0 {
		_, _, _ = shift[C-1], s1[C-1], s2[C-1]
		if wide512(C) {
			chanStatsAVX512(&x[0], len(x)/C, C, c4, &shift[0], &s1[0], &s2[0])
			return
		}
		chanStatsAVX2(&x[0], len(x)/C, C, c4, &shift[0], &s1[0], &s2[0])
	}
	chanStatsGo(x, C, c4, shift, s1, s2)
}

// normApply writes xhat = (x - mean_c) r_c and gamma_c xhat + beta_c
// (through max(., 0) if relu) for the rows of C channels of in.
func normApply(in, out, xh []float32, C int, mean, r []float64, gamma, beta []float32, relu bool) {
	c4 := vecChannels(C)
	if c4 > 0 && len(in) > 0 {
		_, _ = out[len(in)-1], xh[len(in)-1]
		_, _, _, _ = mean[C-1], r[C-1], gamma[C-1], beta[C-1]
		f := 0
		if relu {
			f = 1
		}
		if wide512(C) {
			normApplyAVX512(&in[0], &out[0], &xh[0], len(in)/C, C, c4, &mean[0], &r[0], &gamma[0], &beta[0], f)
			return
		}
		normApplyAVX2(&in[0], &out[0], &xh[0], len(in)/C, C, c4, &mean[0], &r[0], &gamma[0], &beta[0], f)
	}
	normApplyGo(in, out, xh, C, c4, mean, r, gamma, beta, relu)
}

// normSums zeroes dy where act (if not nil) is not positive and adds each
// channel's dy xhat to sa[c] and dy to sb[c] (float64).
func normSums(dy, act, xh []float32, C int, sa, sb []float64) {
	c4 := vecChannels(C)
	if c4 > 0 && len(dy) > 0 {
		_, _ = xh[len(dy)-1], sa[C-1]
		_ = sb[C-1]
		a, f := &dy[0], 0
		if act != nil {
			_ = act[len(dy)-1]
			a, f = &act[0], 1
		}
		if wide512(C) {
			normSumsAVX512(&dy[0], a, &xh[0], len(dy)/C, C, c4, &sa[0], &sb[0], f)
			return
		}
		normSumsAVX2(&dy[0], a, &xh[0], len(dy)/C, C, c4, &sa[0], &sb[0], f)
	}
	normSumsGo(dy, act, xh, C, c4, sa, sb)
}

// normDx writes dx = a_c dy + b_c xhat + e_c (float64, rounded to
// float32) for the rows of C channels of dy.
func normDx(dy, xh, dx []float32, C int, a, b, e []float64) {
	c4 := vecChannels(C)
	if c4 > 0 && len(dy) > 0 {
		_, _ = xh[len(dy)-1], dx[len(dy)-1]
		_, _, _ = a[C-1], b[C-1], e[C-1]
		if wide512(C) {
			normDxAVX512(&dy[0], &xh[0], &dx[0], len(dy)/C, C, c4, &a[0], &b[0], &e[0])
			return
		}
		normDxAVX2(&dy[0], &xh[0], &dx[0], len(dy)/C, C, c4, &a[0], &b[0], &e[0])
	}
	normDxGo(dy, xh, dx, C, c4, a, b, e)
}

// chanSums adds each channel's values to s[c] over the rows of C
// channels of x (float64): blocks of 64 channels with AVX-512 (the sums
// in registers over the rows), then AVX2, four channels at a time, then
// the rest; every channel adds the rows in order.
func chanSums(x []float32, C int, s []float64) {
	c64 := 0
	if hasAVX512 && len(x) > 0 {
		if c64 = C &^ 63; c64 > 0 {
			_ = s[C-1]
			chanSumsAVX512(&x[0], len(x)/C, C, c64, &s[0])
		}
	}
	c4 := vecChannels(C - c64)
	if c4 > 0 && len(x) > 0 {
		_ = s[C-1]
		chanSumsAVX2(&x[c64], len(x)/C, C, c4, &s[c64])
	}
	chanSumsGo(x, C, c64+c4, s)
}

//go:noescape
func allFiniteAVX2(v *float32, n int) bool

// allFinite reports whether every v_k is finite (x - x is 0), 16 at a
// time with AVX2.
func allFinite(v []float32) bool {
	n := 0
	if hasAVX2FMA {
		if n = len(v) &^ 15; n > 0 && !allFiniteAVX2(&v[0], n) {
			return false
		}
	}
	return allFiniteGo(v[n:])
}

//go:noescape
func addScaledDownAVX2(acc, v *float32, f float32, n int)

// addScaledDown adds MulDown(Factor32(c), v[k]) to acc[k] (len(acc) >=
// len(v)), eight at a time with AVX2 (the same product, rounded to
// nearest, flushed to zero when subnormal, then one rounded add).
func addScaledDown(acc, v []float32, c float64) {
	acc = acc[:len(v)]
	n := 0
	if hasAVX2FMA {
		if n = len(v) &^ 7; n > 0 {
			addScaledDownAVX2(&acc[0], &v[0], Factor32(c), n)
		}
	}
	addScaledDownGo(acc[n:], v[n:], c)
}

//go:noescape
func actGradToAVX2(dst, dy, a *float32, n, relu int)

// actGradToFast does the first len(dst) &^ 7 entries of actGradTo (Tanh,
// or ReLU if relu) with AVX2 and returns how many it did.
func actGradToFast(dst, g, a []float32, relu bool) int {
	n := len(dst) &^ 7
	if !hasAVX2FMA || n == 0 {
		return 0
	}
	_, _ = g[n-1], a[n-1]
	r := 0
	if relu {
		r = 1
	}
	actGradToAVX2(&dst[0], &g[0], &a[0], n, r)
	return n
}

//go:noescape
func poolBack2AVX2(dst0, dst1, a0, a1, dy *float32, arg *int32, base, c, wc, ow, act int)

// poolBack2Fast reports whether poolBack2Row takes a pool of C
// channels after activation act: AVX2, C a multiple of 8, act one that
// actGradTo fuses.
func poolBack2Fast(C int, act Activation) bool {
	return hasAVX2FMA && C%8 == 0 && fusesActGrad(act)
}

// poolBack2Row is poolGradToGp's vector form for one row of a 2x2 max
// pool's outputs (C channels, OW = len(g)/C > 0 pixels; poolBack2Fast):
// whole windows written into the producer map's rows dst0 and dst1 (from
// their first interior pixel), the derivative of act taken at a0 and a1
// (the producer's output rows), the maxima found by comparing arg with
// each tap's index (the rows' first float is base in the input map, rows
// wc floats apart).
func poolBack2Row(dst0, dst1, a0, a1, g []float32, arg []int32, base, C, wc int, act Activation) {
	n := 2 * len(g)
	_, _, _, _, _ = dst0[n-1], dst1[n-1], a0[n-1], a1[n-1], arg[len(g)-1]
	poolBack2AVX2(&dst0[0], &dst1[0], &a0[0], &a1[0], &g[0], &arg[0], base, C, wc, len(g)/C, actCode(act))
}

//go:noescape
func poolBackOutAVX2(dst0, dst1, o, dy *float32, arg *int32, base, c, wc, ow, act int)

// poolBack2Out is poolBack2Row with the derivative taken at each window's
// maximum as the pool's output row o (OW C floats) holds it, rather than
// at the input's rows: the same bits (the maximum is the input at arg,
// and the other taps are +0 either way).
func poolBack2Out(dst0, dst1, o, g []float32, arg []int32, base, C, wc int, act Activation) {
	n := 2 * len(g)
	_, _, _, _ = dst0[n-1], dst1[n-1], o[len(g)-1], arg[len(g)-1]
	poolBackOutAVX2(&dst0[0], &dst1[0], &o[0], &g[0], &arg[0], base, C, wc, len(g)/C, actCode(act))
}

// actCode is the vector pool kernels' code for act (poolBack2Fast's).
func actCode(act Activation) int {
	switch act {
	case Tanh:
		return 1
	case ReLU:
		return 2
	}
	return 0
}

//go:noescape
func widenAVX2(d *float64, v *float32, n int)

// widenFast does the first len(v) &^ 15 entries of widenTo with AVX2 and
// returns how many it did.
func widenFast(d []float64, v []float32) int {
	n := len(v) &^ 15
	if !hasAVX2FMA || n == 0 {
		return 0
	}
	_ = d[n-1]
	widenAVX2(&d[0], &v[0], n)
	return n
}
