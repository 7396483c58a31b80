package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestTanh(t *testing.T) {
	worst := 0.0
	for k := -200000; k <= 200000; k++ {
		x := float32(k) * 1e-4 // [-20, 20]
		got := float64(tanh32(x))
		want := math.Tanh(float64(x))
		// float32 rounding of the result is 2^-24 relative; the
		// approximation adds at most 1e-9.
		if d := math.Abs(got-want) / max(math.Abs(want), 1e-30); d > 6.0e-8+1e-9 {
			t.Fatalf("tanh32(%v) = %v, want %v (rel %.2g)", x, got, want, d)
		} else {
			worst = max(worst, d)
		}
	}
	for _, x := range []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), 1e-30, -1e-30} {
		if got, want := float64(tanh32(x)), math.Tanh(float64(x)); got != float64(float32(want)) {
			t.Errorf("tanh32(%v) = %v, want %v", x, got, want)
		}
	}
	if v := tanh32(float32(math.NaN())); v == v {
		t.Errorf("tanh32(NaN) = %v", v)
	}
	t.Logf("worst relative error %.3g", worst)
	// The vectorized row version (float32 arithmetic), NaN included.
	x := make([]float32, 0, 400016)
	for k := -200000; k <= 200015; k++ {
		x = append(x, float32(k)*1e-4)
	}
	x[17] = float32(math.NaN())
	bias := make([]float32, len(x))
	z := append([]float32(nil), x...)
	biasTanh(z, bias)
	worst = 0
	for k, v := range z {
		want := math.Tanh(float64(x[k]))
		if k == 17 {
			if v == v {
				t.Errorf("biasTanh(NaN) = %v", v)
			}
			continue
		}
		if d := math.Abs(float64(v)-want) / max(math.Abs(want), 1e-30); d > 1e-6 {
			t.Fatalf("biasTanh(%v) = %v, want %v (rel %.2g)", x[k], v, want, d)
		} else {
			worst = max(worst, d)
		}
	}
	t.Logf("biasTanh worst relative error %.3g", worst)
}

func BenchmarkTanh(b *testing.B) {
	z := make([]float32, 4096)
	bias := make([]float32, 32)
	for i := range z {
		z[i] = float32(i%200-100) * 0.03
	}
	for b.Loop() {
		biasAct(z, bias, Tanh)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(z)), "ns/elem")
}

func TestAddAxpy(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 100} {
		x := make([]float32, n)
		y := make([]float32, n)
		for k := range x {
			x[k] = float32(k) - 3.5
			y[k] = float32(2 * k)
		}
		z := make([]float32, n)
		addTo(z, x, y)
		add(y, x)
		sameBits(t, "addTo", z, y)
		for k := range y {
			if y[k] != float32(2*k)+float32(k)-3.5 {
				t.Fatalf("n=%d: add: y[%d] = %v", n, k, y[k])
			}
		}
		axpy(0.5, x, y)
		for k := range y {
			if want := float32(2*k) + 1.5*(float32(k)-3.5); y[k] != want {
				t.Fatalf("n=%d: axpy: y[%d] = %v, want %v", n, k, y[k], want)
			}
		}
	}
}

// TestMaxPoolFast checks the vectorized 2x2 pool against the scalar one,
// ties and NaN included.
func TestMaxPoolFast(t *testing.T) {
	s := stage{kind: kPool, pool: 2, in: Shape{16, 5, 6}, out: Shape{16, 2, 3}}
	in := make([]float32, s.in.Size())
	for k := range in {
		in[k] = float32((k * 7919) % 13)
	}
	in[3] = float32(math.NaN())
	in[16*6+5] = float32(math.NaN())
	out1, out2 := make([]float32, s.out.Size()), make([]float32, s.out.Size())
	arg1, arg2 := make([]int32, s.out.Size()), make([]int32, s.out.Size())
	if !s.maxPool2Fast(in, out1, s.out.W*s.out.C, arg1) {
		t.Skip("skipped because this machine has no AVX2 vector pool to compare with the portable one")
	}
	s.maxPoolLoop(in, out2, s.out.W*s.out.C, arg2)
	for k := range out1 {
		if arg1[k] != arg2[k] || (out1[k] != out2[k] && out1[k] == out1[k]) {
			t.Fatalf("output %d: fast (%v at %d), scalar (%v at %d)", k, out1[k], arg1[k], out2[k], arg2[k])
		}
	}
}

// sameBits reports whether a and b hold the same float32 values bit for
// bit (any NaN matching any NaN).
func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	for k := range a {
		if math.Float32bits(a[k]) != math.Float32bits(b[k]) && !(a[k] != a[k] && b[k] != b[k]) {
			t.Fatalf("%s[%d]: %v (%#x), portable %v (%#x)", what, k, a[k], math.Float32bits(a[k]), b[k], math.Float32bits(b[k]))
		}
	}
}

func sameBits64(t *testing.T, what string, a, b []float64) {
	t.Helper()
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) && !(a[k] != a[k] && b[k] != b[k]) {
			t.Fatalf("%s[%d]: %v, portable %v", what, k, a[k], b[k])
		}
	}
}

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for k := range v {
		v[k] = float32(scale * rng.NormFloat64())
	}
	return v
}

func randVec64(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for k := range v {
		v[k] = rng.NormFloat64()
	}
	return v
}

// TestNormKernels checks the AVX2 norm kernels and sumsq64 against their
// portable loops bit for bit, for channel counts with and without a
// remainder, with NaN inputs, -0 results and ReLU masks over NaN, -0 and
// 0.
func TestNormKernels(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("skipped because this machine has no AVX2 kernels to compare with the portable loops")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, C := range []int{4, 6, 8, 16, 24, 32, 64, 128, 131, 200} {
		const rows = 7
		n := rows * C
		x := randVec(rng, n, 3)
		x[C+1] = float32(math.NaN())
		shift, mean, r := randVec64(rng, C), randVec64(rng, C), randVec64(rng, C)
		s1, s2 := randVec64(rng, C), randVec64(rng, C)
		g1, g2 := append([]float64(nil), s1...), append([]float64(nil), s2...)
		chanStats(x, C, shift, s1, s2)
		chanStatsGo(x, C, 0, shift, g1, g2)
		sameBits64(t, "chanStats s1", s1, g1)
		sameBits64(t, "chanStats s2", s2, g2)

		gamma, beta := randVec(rng, C, 1), randVec(rng, C, 1)
		gamma[2], beta[2] = 0, float32(math.Copysign(0, -1)) // -0 outputs
		for _, relu := range []bool{false, true} {
			out, xh := make([]float32, n), make([]float32, n)
			out2, xh2 := make([]float32, n), make([]float32, n)
			normApply(x, out, xh, C, mean, r, gamma, beta, relu)
			normApplyGo(x, out2, xh2, C, 0, mean, r, gamma, beta, relu)
			sameBits(t, "normApply xh", xh, xh2)
			sameBits(t, "normApply out", out, out2)
		}

		dy, xh := randVec(rng, n, 1), randVec(rng, n, 1)
		act := randVec(rng, n, 1)
		act[0], act[1], act[2] = float32(math.NaN()), float32(math.Copysign(0, -1)), 0
		for _, a := range [][]float32{nil, act} {
			d1, d2 := append([]float32(nil), dy...), append([]float32(nil), dy...)
			sa, sb := randVec64(rng, C), randVec64(rng, C)
			ga, gb := append([]float64(nil), sa...), append([]float64(nil), sb...)
			normSums(d1, a, xh, C, sa, sb)
			normSumsGo(d2, a, xh, C, 0, ga, gb)
			sameBits(t, "normSums dy", d1, d2)
			sameBits64(t, "normSums sa", sa, ga)
			sameBits64(t, "normSums sb", sb, gb)
		}

		cs, gs := randVec64(rng, C), make([]float64, C)
		copy(gs, cs)
		chanSums(x, C, cs)
		chanSumsGo(x, C, 0, gs)
		sameBits64(t, "chanSums", cs, gs)

		a, b, e := randVec64(rng, C), randVec64(rng, C), randVec64(rng, C)
		dx, dx2 := make([]float32, n), make([]float32, n)
		normDx(dy, xh, dx, C, a, b, e)
		normDxGo(dy, xh, dx2, C, 0, a, b, e)
		sameBits(t, "normDx", dx, dx2)
	}
	for _, n := range []int{1, 16, 17, 64, 100} {
		for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			for k := range n {
				v := randVec(rng, n, 1e30)
				if allFinite(v) != true {
					t.Fatalf("n=%d: allFinite of finite values is false", n)
				}
				v[k] = float32(bad)
				if allFinite(v) {
					t.Fatalf("n=%d: allFinite with %v at %d is true", n, bad, k)
				}
			}
		}
	}
}

// TestSumsq64 checks sumsq64 (the kernels where the machine has them)
// against sumsq64Go bit for bit, and sumsq64Go against its documented
// order written out: every length up to 300 and some large ones, values
// from subnormal to the float32 maximum, zeros, infinities and NaN; and
// sumsqLanes over pieces of multiples of 16 (odd ones included, as
// recompute.go's panels and bias give) against sumsq64 of their
// concatenation.
func TestSumsq64(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	// Half the vectors with extreme values (whose squares swamp the
	// others' in the sum), half without.
	vec := func(n int) []float32 {
		v := randVec(rng, n, 1e3)
		if rng.IntN(2) == 0 {
			return v
		}
		for k := range v {
			switch rng.IntN(16) {
			case 0:
				v[k] = float32(math.Copysign(3e38, float64(v[k]))) // squares near 1e77
			case 1:
				v[k] *= 1e-42 // subnormal or zero
			case 2:
				v[k] = float32(math.Copysign(0, float64(v[k])))
			}
		}
		return v
	}
	lengths := []int{1000, 1024 + 16, 4099, 100003}
	for n := range 301 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		v := vec(n)
		want := sumsq64Ref(v)
		if got := sumsq64Go(v); got != want {
			t.Fatalf("n=%d: sumsq64Go %v, its documented order %v", n, got, want)
		}
		if got := sumsq64(v); got != want {
			t.Fatalf("n=%d: sumsq64 %v, portable %v", n, got, want)
		}
	}
	for _, n := range []int{1, 16, 33, 64, 200} {
		for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			for _, k := range []int{0, n / 2, n - 1} {
				v := vec(n)
				v[k] = float32(bad)
				got, want := sumsq64(v), sumsq64Go(v)
				if !sameFloat(got, want) || (math.IsNaN(bad) != math.IsNaN(got)) || (!math.IsNaN(bad) && !math.IsInf(got, 1)) {
					t.Errorf("n=%d, %v at %d: sumsq64 %v, portable %v", n, bad, k, got, want)
				}
			}
		}
	}
	for _, pieces := range [][]int{{16}, {16, 16, 16}, {32, 16, 4096}, {0, 48, 16, 1024, 160}, {48, 80, 16, 0, 112, 32}, {4096 + 16, 16, 4096 + 48}} {
		var all []float32
		var fast, slow sumsqLanes
		for _, n := range pieces {
			v := vec(n)
			all = append(all, v...)
			fast.add(v)
			slow.addGo(v)
		}
		want := sumsq64(all)
		if got := fast.total(); got != want {
			t.Errorf("pieces %v: sumsqLanes.add %v, sumsq64 %v", pieces, got, want)
		}
		if got := slow.total(); got != want {
			t.Errorf("pieces %v: sumsqLanes.addGo %v, sumsq64 %v", pieces, got, want)
		}
	}
}

// sumsq64Ref is sumsq64's order as documented, written out: term k of
// the first len(v) &^ 15 to partial sum k mod 32; the four vectors of
// eight partial sums added pairwise, then their eight lanes pairwise;
// then the rest in order.
func sumsq64Ref(v []float32) float64 {
	var p [32]float64
	n := len(v) &^ 15
	for k, x := range v[:n] {
		p[k%32] += float64(x) * float64(x)
	}
	var t [8]float64
	for l := range t {
		t[l] = (p[l] + p[8+l]) + (p[16+l] + p[24+l])
	}
	s := ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
	for _, x := range v[n:] {
		s += float64(x) * float64(x)
	}
	return s
}

// TestGroupNormLargeMean checks xhat against a two-pass float64 reference
// on inputs whose mean (2^20) is 10^7 times their spread: the statistics
// are accumulated shifted by each channel's first value, so nothing
// cancels (E[x^2] - mean^2 in float64 would lose about 1e-2 of the
// variance here).
func TestGroupNormLargeMean(t *testing.T) {
	const C, H, W, G = 8, 6, 6, 2
	s := stage{kind: kNorm, in: Shape{C, H, W}, out: Shape{C, H, W}, groups: G, eps: 1e-12,
		w: Param{0, C}, b: Param{C, C}}
	params := make([]float32, 2*C)
	for c := range C {
		params[c] = 1
	}
	n := C * H * W
	in := make([]float32, n)
	for k := range in {
		in[k] = float32(1<<20 + float64((k*7919)%13)*0.125)
	}
	out, xh := make([]float32, n), make([]float32, n)
	rstd := make([]float64, G)
	s.normForward(params, in, out, xh, rstd, make([]float64, normScratch(C)), normIO{})
	Cg := C / G
	for g := range G {
		m, v := 0.0, 0.0
		for k := range H * W {
			for c := g * Cg; c < (g+1)*Cg; c++ {
				m += float64(in[k*C+c])
			}
		}
		m /= float64(H * W * Cg)
		for k := range H * W {
			for c := g * Cg; c < (g+1)*Cg; c++ {
				d := float64(in[k*C+c]) - m
				v += d * d
			}
		}
		r := 1 / math.Sqrt(v/float64(H*W*Cg)+s.eps)
		for k := range H * W {
			for c := g * Cg; c < (g+1)*Cg; c++ {
				want := (float64(in[k*C+c]) - m) * r
				if d := math.Abs(float64(xh[k*C+c]) - want); d > 1e-6*max(1, math.Abs(want)) {
					t.Fatalf("group %d pixel %d channel %d: xhat %v, want %v", g, k, c, xh[k*C+c], want)
				}
			}
		}
	}
}

// TestFirstNonFinite: the first NaN or infinity of vectors of every
// length around the block and vector widths, at every position of the
// short ones, with other specials (subnormals, the largest finite
// values, zeros) around it.
func TestFirstNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	finite := []float32{0, float32(math.Copysign(0, -1)), 0x1p-149, 0x1.fffffep127, -0x1.fffffep127, 1}
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, n := range []int{0, 1, 15, 16, 17, 33, 1023, 1024, 1025, 3000} {
		v := make([]float32, n)
		for k := range v {
			v[k] = finite[rng.IntN(len(finite))]
		}
		if got := FirstNonFinite(v); got != -1 {
			t.Fatalf("n=%d, all finite: %d", n, got)
		}
		for _, at := range []int{0, n / 3, n / 2, n - 1} {
			if at < 0 || at >= n {
				continue
			}
			w := append([]float32(nil), v...)
			w[at] = bad[rng.IntN(len(bad))]
			if at+1 < n {
				w[n-1] = bad[rng.IntN(len(bad))]
			}
			if got := FirstNonFinite(w); got != at {
				t.Fatalf("n=%d, first at %d: %d", n, at, got)
			}
		}
	}
}
