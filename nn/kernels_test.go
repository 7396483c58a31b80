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
