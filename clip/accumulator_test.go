package clip

import (
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// TestNewAccumulatorRefuses checks that NewAccumulator refuses, as an
// invalid argument, a rule it cannot honour, and accepts what NonPrivate
// makes moot.
func TestNewAccumulatorRefuses(t *testing.T) {
	for _, opt := range []Options{
		{},
		{Norm: -1},
		{Norm: math.Inf(1)},
		{Norm: math.NaN()},
		{Norm: 1, LInfZero: -1},
		{Norm: 1, LInfZero: math.NaN()},
		{PerLayer: []float64{1, 2}},
		{PerLayer: []float64{1, 0}},
	} {
		if _, err := NewAccumulator(opt); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%+v: %v, want an invalid-argument error", opt, err)
		}
	}
	for _, opt := range []Options{
		{Norm: 1},
		{Norm: 1e-30, LInfZero: 5},
		{NonPrivate: true},
		{NonPrivate: true, Norm: -1, LInfZero: math.NaN(), PerLayer: []float64{0}},
	} {
		if _, err := NewAccumulator(opt); err != nil {
			t.Errorf("%+v: %v", opt, err)
		}
	}
}

// TestAccumulatorSetNorm checks that adaptive clipping's new norm applies
// to the following units, and that a bad norm is refused.
func TestAccumulatorSetNorm(t *testing.T) {
	a, err := NewAccumulator(Options{Norm: 1})
	if err != nil {
		t.Fatal(err)
	}
	sum := make([]float32, 2)
	for _, c := range []float64{1, 10} {
		if err := a.SetNorm(c); err != nil {
			t.Fatal(err)
		}
		a.Begin(sum, 1)
		a.Add(0, []float32{3, 4}, 0.5)
		st := a.Stats()
		if clipped := c < 5; (st.Clipped == 1) != clipped || (st.WithinNorm == 1) == clipped {
			t.Errorf("norm 5 at clip norm %v: %+v", c, st)
		}
	}
	for _, c := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if err := a.SetNorm(c); !errors.Is(err, dpcore.ErrInvalid) || a.Norm() != 10 {
			t.Errorf("SetNorm(%v): %v, norm now %v", c, err, a.Norm())
		}
	}
	np, err := NewAccumulator(Options{NonPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := np.SetNorm(1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("SetNorm without clipping: %v", err)
	}
}
