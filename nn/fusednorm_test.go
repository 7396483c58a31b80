package nn

import (
	"math"
	"testing"
)

// TestFusedNorm: an implicit convolution's per-example squared norm taken
// by its weight-gradient product as the product stores the gradient
// (fusedNorm) is, bit for bit, the float64 sum of the gradient's squares
// column by column (rows in the internal order, the bias as one more
// row), then over the columns in order; it is within 2(n+2)·2^-53
// relative of the unfused path's sumsq64 (noFusedNorm; each is within
// (n+2)·2^-53 of the exact norm of the gradient's n entries); every other
// layer's norm, each per-example gradient and loss are the unfused
// path's bit for bit; and the clipped sums, their factors taken from the
// norms (most examples clipped), agree entry by entry within 2^-20 of the
// sum of the entry's per-example magnitudes (a factor rounded to float32
// differs by at most an ulp, 2^-23). On every test network with an
// implicit convolution (channel counts below the kernel's 32 columns:
// the portable squares) and on the CIFAR CNN (32, 64 and 128 channels:
// the AVX-512 kernel's epilogue where there is one, several blocks of
// depth, the first layer's ragged rows), with an example holding an
// infinite input.
func TestFusedNorm(t *testing.T) {
	nets := testNets()
	nets["cifar"] = cifarCNN()
	some := 0
	for name, b := range nets {
		t.Run(name, func(t *testing.T) {
			n := 5
			if name == "cifar" {
				n = 3
			}
			fp, ref, rng, classes := planPair(t, b, 37, len(name), n, func(o *Options) { o.noFusedNorm = true })
			implicit := map[int]*stage{} // by layer with parameters
			for i := range fp.stages {
				if s := &fp.stages[i]; s.implicit {
					implicit[s.aff] = s
				}
			}
			if len(implicit) == 0 {
				t.Skip("no implicit convolution in this test network")
			}
			some++
			x, y := b.batch(rng, n, classes)
			x[x0(b, 1)+1] = float32(math.Inf(1))
			g, lf := gradientsOf(t, fp, x, y, b.n)
			gr, lr := gradientsOf(t, ref, x, y, b.n)
			for i := range n {
				sameBits(t, "gradient", g[i], gr[i])
				if !sameFloat(lf[i], lr[i]) {
					t.Errorf("example %d: loss %v, unfused %v", i, lf[i], lr[i])
				}
			}
			step := func(p *Plan) ([][]float64, []float32) {
				cl := &flatClipper{zeta: 1e-2, sq: make([][]float64, n)}
				sum := make([]float32, b.n)
				if _, err := p.Step(x, y, sum, cl); err != nil {
					t.Fatal(err)
				}
				return cl.sq, sum
			}
			qf, sf := step(fp)
			qr, sr := step(ref)
			for i := range n {
				if i == 1 {
					continue // not finite: no norm asked for
				}
				for l := range qr[i] {
					got, old := qf[i][l], qr[i][l]
					s, ok := implicit[l]
					if !ok {
						if !sameFloat(got, old) {
							t.Errorf("example %d layer %d: squared norm %v, unfused %v", i, l, got, old)
						}
						continue
					}
					if want := colNorm(g[i], s); !sameFloat(got, want) {
						t.Errorf("example %d layer %d: squared norm %v, column by column %v", i, l, got, want)
					}
					bound := 2 * float64(s.fi*s.fo+s.b.Len+2) * 0x1p-53 * old
					if !(math.Abs(got-old) <= bound) {
						t.Errorf("example %d layer %d: squared norm %v, unfused %v: off by more than %v", i, l, got, old, bound)
					}
				}
			}
			for k := range sr {
				mag := 0.0
				for i := range n {
					if i != 1 {
						mag += math.Abs(float64(g[i][k]))
					}
				}
				if d := math.Abs(float64(sf[k]) - float64(sr[k])); !(d <= 0x1p-20*mag) {
					t.Errorf("clipped sum[%d] = %v, unfused %v: off by %v > 2^-20 × %v", k, sf[k], sr[k], d, mag)
				}
			}
		})
	}
	if some == 0 {
		t.Error("no test network has an implicit convolution")
	}
}

// x0 is where example i's input starts in a batch of b's inputs.
func x0(b *builder, i int) int { return i * b.net.Input.Size() }

// colNorm is fusedNorm's squared norm of convolution s's gradient in the
// example gradient g (parameter layout): the squares of each column of
// the weight, its rows in the internal order, then of the bias entry,
// summed in float64; then the columns summed in order.
func colNorm(g []float32, s *stage) float64 {
	col := make([]float64, s.fo)
	for _, e := range s.perm {
		for c, v := range g[s.w.Offset+int(e)*s.fo : s.w.Offset+(int(e)+1)*s.fo] {
			col[c] += float64(v) * float64(v)
		}
	}
	for c, v := range g[s.b.Offset : s.b.Offset+s.b.Len] {
		col[c] += float64(v) * float64(v)
	}
	t := 0.0
	for _, v := range col {
		t += v
	}
	return t
}
