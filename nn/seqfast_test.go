package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSeqGELU checks the tanh-approximated GELU (eight at a time, in
// blocks) against the plain float64 formula, at lengths that leave tails
// and span blocks: the error below 2e-6 relative plus 1e-6 |x| (the tanh
// approximant's 1e-6 in 1 + tanh, which cancels for negative x), the kept
// tanh equal to tanh32's to 1e-6.
func TestSeqGELU(t *testing.T) {
	p := &SeqPlan{}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 8, 13, 512, 515, 1500} {
		z := make([]float32, n)
		for k := range z {
			z[k] = float32(rng.NormFloat64() * 4)
		}
		z[0] = -0.0
		f, th := make([]float32, n), make([]float32, n)
		p.gelu(z, f, th)
		for k, x := range z {
			u := geluC * (float64(x) + 0.044715*float64(x)*float64(x)*float64(x))
			want := 0.5 * float64(x) * (1 + math.Tanh(u))
			if d := math.Abs(float64(f[k]) - want); d > 2e-6*math.Abs(want)+1e-6*math.Abs(float64(x)) {
				t.Fatalf("n %d: gelu(%v) = %v, want %v", n, x, f[k], want)
			}
			if d := math.Abs(float64(th[k] - tanh32(float32(u)))); d > 1e-6 {
				t.Fatalf("n %d: tanh(%v) = %v, tanh32 %v", n, u, th[k], tanh32(float32(u)))
			}
		}
	}
}

// TestSoftmaxKernels checks maxOf, expShift and scaleBy (eight at a time
// where the processor allows) against plain loops: the maximum exactly,
// each exp within 2 units in the last place of float32 (0 below
// exp(-87), NaN for NaN), the sum within 1e-12 relative of the float64
// sum of the results, scaleBy bit for bit; at lengths with tails.
func TestSoftmaxKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 5, 8, 9, 64, 1003} {
		z := make([]float32, n)
		for k := range z {
			z[k] = float32(rng.NormFloat64() * 30)
		}
		z[n/2] = float32(rng.NormFloat64() * 300)
		mx := float32(math.Inf(-1))
		for _, v := range z {
			mx = max(mx, v)
		}
		if got := maxOf(z); got != mx {
			t.Fatalf("n %d: maxOf = %v, want %v", n, got, mx)
		}
		g := make([]float32, n)
		s := expShift(z, g, mx)
		sum := 0.0
		for k, v := range z {
			x := float64(v - mx)
			want := math.Exp(x)
			if x < -87 {
				want = 0
			}
			if d := math.Abs(float64(g[k]) - want); d > 2*0x1p-24*want {
				t.Fatalf("n %d: exp(%v) = %v, want %v (%.2g ulp)", n, x, g[k], want, d/want/0x1p-24)
			}
			sum += float64(g[k])
		}
		if math.Abs(s-sum) > 1e-12*sum {
			t.Fatalf("n %d: sum %v, want %v", n, s, sum)
		}
		h := append([]float32(nil), g...)
		scaleBy(g, 0.37)
		for k := range g {
			if g[k] != h[k]*0.37 {
				t.Fatalf("n %d: scale %v, want %v", n, g[k], h[k]*0.37)
			}
		}
	}
	// Every exponent band: exp at 8 points of each binade of -x.
	z := make([]float32, 0, 1024)
	for x := float32(-90); x <= 0; x += 0.0877 {
		z = append(z, x)
	}
	z = append(z, float32(math.NaN()), float32(math.Inf(-1)), -87, 0)
	z = z[:len(z)&^7]
	g := make([]float32, len(z))
	expShift(z, g, 0)
	for k, v := range z {
		want := math.Exp(float64(v))
		switch {
		case math.IsNaN(float64(v)):
			if !math.IsNaN(float64(g[k])) {
				t.Errorf("exp(NaN) = %v", g[k])
			}
		case v < -87:
			if g[k] != 0 {
				t.Errorf("exp(%v) = %v, want 0", v, g[k])
			}
		case math.Abs(float64(g[k])-want) > 2*0x1p-24*want:
			t.Errorf("exp(%v) = %v, want %v", v, g[k], want)
		}
	}
}

// TestGELUGrad checks the GELU's derivative eight at a time (float32)
// against the float64 loop, at lengths with tails: within 1e-6 |dy|
// (1 + |x|).
func TestGELUGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{3, 8, 21, 1000} {
		z, th, dy := make([]float32, n), make([]float32, n), make([]float32, n)
		for k := range z {
			z[k] = float32(rng.NormFloat64() * 3)
			th[k] = tanh32(float32(geluC * (float64(z[k]) + 0.044715*float64(z[k])*float64(z[k])*float64(z[k]))))
			dy[k] = float32(rng.NormFloat64())
		}
		want := append([]float32(nil), dy...)
		geluGradTanhGo(z, th, want)
		got := append([]float32(nil), dy...)
		geluGradTanh(z, th, got)
		for k := range got {
			if d := math.Abs(float64(got[k] - want[k])); d > 1e-6*math.Abs(float64(dy[k]))*(1+math.Abs(float64(z[k]))) {
				t.Fatalf("n %d: x %v: %v, want %v", n, z[k], got[k], want[k])
			}
		}
	}
}

// TestGhostPays checks the per-weight choice of norms at known shapes:
// the GPT-2 benchmark's blocks (context 128, width 256) materialized; a
// short context's wide weights ghosts; beyond the memory budget, the
// ghost norm only where it needs less memory (GPT-2 small at context
// 1024 stays materialized as before, width 1024 at context 128 becomes
// a ghost).
func TestGhostPays(t *testing.T) {
	for _, c := range []struct {
		T, in, out, matW int
		ghost            bool
	}{
		{128, 256, 768, 0, false}, {128, 256, 256, 0, false}, {128, 256, 1024, 0, false}, {128, 1024, 256, 0, false},
		{3, 8, 24, 0, true}, {16, 768, 3072, 0, true},
		{1024, 768, 2304, matBudget, false}, {128, 1024, 4096, matBudget, true}, {128, 256, 1024, matBudget, true},
	} {
		p := &SeqPlan{t: Transformer{Context: c.T}}
		if got := p.ghostPays(c.in, c.out, c.matW); got != c.ghost {
			t.Errorf("context %d, %d x %d after %d materialized: ghost %v, want %v", c.T, c.in, c.out, c.matW, got, c.ghost)
		}
	}
}
