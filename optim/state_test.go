package optim

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// newTestOptimizers builds one of each optimizer (and variants) over d.
func newTestOptimizers(t *testing.T, d, n int) map[string]func() Optimizer {
	t.Helper()
	s := CooldownFraction(0.1, n, 0.25)
	mk := func(f func() (Optimizer, error)) func() Optimizer {
		return func() Optimizer {
			o, err := f()
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
	}
	return map[string]func() Optimizer{
		"sgd":      mk(func() (Optimizer, error) { return NewSGD(d, s, n) }),
		"momentum": mk(func() (Optimizer, error) { return NewMomentum(d, 0.9, s, n, MomentumOptions{}) }),
		"nesterov+wd": mk(func() (Optimizer, error) {
			return NewMomentum(d, 0.95, s, n, MomentumOptions{Nesterov: true, WeightDecay: 1e-3})
		}),
		"adamw": mk(func() (Optimizer, error) { return NewAdam(d, s, n, AdamOptions{WeightDecay: 0.01}) }),
	}
}

func zeroLike(o Optimizer) Optimizer {
	switch o.(type) {
	case *SGD:
		return new(SGD)
	case *Momentum:
		return new(Momentum)
	}
	return new(Adam)
}

func TestResumeBitIdentical(t *testing.T) {
	const d, n, cut = 17, 24, 9
	grads, th0 := formatGrads()
	for name, mk := range newTestOptimizers(t, d, n) {
		t.Run(name, func(t *testing.T) {
			ref := mk()
			pr := append([]float32(nil), th0...)
			for i := range grads {
				if err := ref.Step(pr, grads[i]); err != nil {
					t.Fatal(err)
				}
			}
			a := mk()
			pa := append([]float32(nil), th0...)
			for i := 0; i < cut; i++ {
				if err := a.Step(pa, grads[i]); err != nil {
					t.Fatal(err)
				}
			}
			blob, err := a.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			b := resumeFrom(t, zeroLike(a), blob, pa, pr, grads, cut)
			// The restored optimizer reports the same workload.
			w1, e1 := ref.Workload(n)
			w2, e2 := b.Workload(n)
			if (e1 == nil) != (e2 == nil) || (e1 == nil && w1.String() != w2.String()) {
				t.Fatalf("workload after restore %v (%v), before %v (%v)", w2, e2, w1, e1)
			}
			// One more step than scheduled fails.
			if err := b.Step(pa, grads[0]); !errors.Is(err, dpcore.ErrInvalid) {
				t.Fatalf("step past the schedule: %v", err)
			}
		})
	}
}

func TestResumeFloat64(t *testing.T) {
	const d, n = 5, 10
	o, _ := NewMomentum(d, 0.9, Constant(0.5), n, MomentumOptions{})
	ref, _ := NewMomentum(d, 0.9, Constant(0.5), n, MomentumOptions{})
	g, th0 := gradStream(n, d, 9)
	p, pr := append([]float64(nil), th0...), append([]float64(nil), th0...)
	for i := 0; i < n; i++ {
		if i == 4 {
			blob, err := o.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			o = new(Momentum)
			if err := o.UnmarshalBinary(blob); err != nil {
				t.Fatal(err)
			}
			// Precision is part of the state.
			if err := o.Step(make([]float32, d), make([]float32, d)); !errors.Is(err, dpcore.ErrInvalid) {
				t.Fatalf("float32 step on a float64 optimizer: %v", err)
			}
		}
		if err := o.Step64(p, g[i]); err != nil {
			t.Fatal(err)
		}
		if err := ref.Step64(pr, g[i]); err != nil {
			t.Fatal(err)
		}
	}
	for k := range p {
		if p[k] != pr[k] {
			t.Fatalf("param %d = %v, want %v", k, p[k], pr[k])
		}
	}
}

func TestBadInput(t *testing.T) {
	s := Constant(0.1)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"dim 0", func() error { _, err := NewSGD(0, s, 5); return err }()},
		{"dim -1", func() error { _, err := NewMomentum(-1, 0.9, s, 5, MomentumOptions{}); return err }()},
		{"beta 1", func() error { _, err := NewMomentum(3, 1, s, 5, MomentumOptions{}); return err }()},
		{"beta -0.1", func() error { _, err := NewMomentum(3, -0.1, s, 5, MomentumOptions{}); return err }()},
		{"beta NaN", func() error { _, err := NewMomentum(3, math.NaN(), s, 5, MomentumOptions{}); return err }()},
		{"weight decay -1", func() error { _, err := NewMomentum(3, 0.5, s, 5, MomentumOptions{WeightDecay: -1}); return err }()},
		{"steps 0", func() error { _, err := NewSGD(3, s, 0); return err }()},
		{"explicit too short", func() error { _, err := NewSGD(3, Explicit([]float64{1, 2}), 5); return err }()},
		{"schedule NaN", func() error { _, err := NewSGD(3, Constant(math.NaN()), 5); return err }()},
		{"adam beta2 1", func() error { _, err := NewAdam(3, s, 5, AdamOptions{Beta2: 1}); return err }()},
		{"adam dim 0", func() error { _, err := NewAdam(0, s, 5, AdamOptions{}); return err }()},
		{"zero optimizer step", new(Momentum).Step(nil, nil)},
	} {
		if !errors.Is(c.err, dpcore.ErrInvalid) {
			t.Errorf("%s: error %v, want dpcore.ErrInvalid", c.name, c.err)
		}
	}

	const d = 4
	for name, mk := range newTestOptimizers(t, d, 6) {
		o := mk()
		p := []float32{1, 2, 3, 4}
		good := []float32{0.1, 0.2, 0.3, 0.4}
		if err := o.Step(p, good); err != nil {
			t.Fatal(err)
		}
		before := append([]float32(nil), p...)
		state, _ := o.MarshalBinary()
		inf := float32(math.Inf(1))
		for _, bad := range []struct {
			what    string
			p, grad []float32
		}{
			{"short grad", p, good[:3]},
			{"long params", append(p[:d:d], 5), good},
			{"NaN grad", p, []float32{0, float32(math.NaN()), 0, 0}},
			{"Inf grad", p, []float32{0, 0, 0, -inf}},
		} {
			if err := o.Step(bad.p, bad.grad); !errors.Is(err, dpcore.ErrInvalid) {
				t.Errorf("%s: %s: error %v, want dpcore.ErrInvalid", name, bad.what, err)
			}
		}
		for k := range p {
			if p[k] != before[k] {
				t.Fatalf("%s: params changed by rejected steps: %v, was %v", name, p, before)
			}
		}
		if after, _ := o.MarshalBinary(); string(after) != string(state) {
			t.Fatalf("%s: optimizer state changed by rejected steps", name)
		}
		if o.StepIndex() != 1 {
			t.Fatalf("%s: step index %d after rejected steps", name, o.StepIndex())
		}
		if _, err := o.Workload(7); err == nil {
			t.Errorf("%s: workload beyond the schedule accepted", name)
		}
	}
}

func TestCorruptState(t *testing.T) {
	o, _ := NewMomentum(8, 0.9, Constant(1), 4, MomentumOptions{})
	if err := o.Step(make([]float32, 8), make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	blob, _ := o.MarshalBinary()
	for name, data := range map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("not an optimizer state at all"),
		"truncated": blob[:len(blob)-5],
	} {
		var m Momentum
		if err := m.UnmarshalBinary(data); err == nil {
			t.Errorf("%s state accepted", name)
		}
	}
	var s SGD
	if err := s.UnmarshalBinary(blob); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("momentum state restored into SGD: %v", err)
	}
	var a Adam
	if err := a.UnmarshalBinary(blob); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("momentum state restored into Adam: %v", err)
	}
}

func FuzzUnmarshalState(f *testing.F) {
	o, _ := NewAdam(3, Constant(1), 4, AdamOptions{})
	_ = o.Step(make([]float32, 3), []float32{1, 2, 3})
	blob, _ := o.MarshalBinary()
	f.Add(blob)
	m, _ := NewMomentum(3, 0.5, CooldownLast(1, 2), 4, MomentumOptions{Nesterov: true})
	_ = m.Step(make([]float32, 3), []float32{1, 2, 3})
	blob, _ = m.MarshalBinary()
	f.Add(blob)
	f.Fuzz(func(t *testing.T, data []byte) {
		var a Adam
		if a.UnmarshalBinary(data) == nil && a.dim <= 1<<16 {
			// A state that restores must step without panicking.
			_ = a.Step(make([]float32, a.dim), make([]float32, a.dim))
		}
		var mm Momentum
		if mm.UnmarshalBinary(data) == nil && mm.h.dim <= 1<<16 {
			_ = mm.Step(make([]float32, mm.h.dim), make([]float32, mm.h.dim))
		}
	})
}

// A state whose dimension overflows 4*dim must be rejected, not allocated.
func TestStateDimOverflow(t *testing.T) {
	o, _ := NewMomentum(1, 0.5, Constant(1), 2, MomentumOptions{})
	_ = o.Step([]float32{0}, []float32{1})
	s := savedState{
		Version: stateVersion, Kind: "momentum", Dim: 1<<62 + 1, Steps: 2, Step: 1,
		Beta: 0.5, Schedule: Constant(1), Precision: uint8(prec32), Buffers: [][]byte{{0, 0, 0, 0}},
	}
	blob, err := atomicfile.MarshalState(stateMagic, stateVersion, &s)
	if err != nil {
		t.Fatal(err)
	}
	if err := new(Momentum).UnmarshalBinary(blob); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "bytes for 4611686018427387905") {
		t.Fatalf("overflowing dimension: %v", err)
	}
}
