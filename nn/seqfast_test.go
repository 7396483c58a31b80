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
