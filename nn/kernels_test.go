package nn

import (
	"math"
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
	for _, n := range []int{0, 1, 7, 8, 9, 31, 100} {
		x := make([]float32, n)
		y := make([]float32, n)
		for k := range x {
			x[k] = float32(k) - 3.5
			y[k] = float32(2 * k)
		}
		add(y, x)
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
	if !s.maxPool2Fast(in, out1, arg1) {
		t.Skip("skipped because this machine has no AVX2 vector pool to compare with the portable one")
	}
	scalarPool(&s, in, out2, arg2)
	for k := range out1 {
		if arg1[k] != arg2[k] || (out1[k] != out2[k] && out1[k] == out1[k]) {
			t.Fatalf("output %d: fast (%v at %d), scalar (%v at %d)", k, out1[k], arg1[k], out2[k], arg2[k])
		}
	}
}

// scalarPool is maxPool's portable loop.
func scalarPool(s *stage, in, out []float32, arg []int32) {
	C, W := s.in.C, s.in.W
	S := s.pool
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			o := (oh*OW + ow) * C
			base := (oh*S*W + ow*S) * C
			for ch := range C {
				out[o+ch], arg[o+ch] = in[base+ch], int32(base+ch)
				for dr := range S {
					for dc := range S {
						b := ((oh*S+dr)*W+ow*S+dc)*C + ch
						if in[b] > out[o+ch] {
							out[o+ch], arg[o+ch] = in[b], int32(b)
						}
					}
				}
			}
		}
	}
}
