package optim

import "testing"

const benchDim = 1_000_000

func benchStep(b *testing.B, o Optimizer) {
	p := make([]float32, benchDim)
	g := make([]float32, benchDim)
	for i := range g {
		g[i] = float32(i%7) - 3
	}
	b.SetBytes(4 * benchDim)
	b.ResetTimer()
	for b.Loop() {
		if err := o.Step(p, g); err != nil {
			b.Fatal(err)
		}
	}
}

// Steps are bounded by the schedule, so the benchmarks schedule more steps
// than b.N can reach.
const benchSteps = 1 << 24

func BenchmarkSGDStep(b *testing.B) {
	o, _ := NewSGD(benchDim, Constant(0.1), benchSteps)
	benchStep(b, o)
}

func BenchmarkMomentumStep(b *testing.B) {
	o, _ := NewMomentum(benchDim, 0.9, Constant(0.1), benchSteps, MomentumOptions{})
	benchStep(b, o)
}

func BenchmarkNesterovWDStep(b *testing.B) {
	o, _ := NewMomentum(benchDim, 0.9, Constant(0.1), benchSteps, MomentumOptions{Nesterov: true, WeightDecay: 1e-4})
	benchStep(b, o)
}

func BenchmarkAdamStep(b *testing.B) {
	o, _ := NewAdam(benchDim, Constant(1e-3), benchSteps, AdamOptions{})
	benchStep(b, o)
}

func BenchmarkMomentumMarshal(b *testing.B) {
	o, _ := NewMomentum(benchDim, 0.9, Constant(0.1), 10, MomentumOptions{})
	_ = o.Step(make([]float32, benchDim), make([]float32, benchDim))
	for b.Loop() {
		if _, err := o.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}
