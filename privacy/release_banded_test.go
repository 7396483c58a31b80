package privacy

import (
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/noise"
)

// A release plan takes a banded strategy above dpcore.DenseStepLimit
// steps: the lattice's encoder rows, the sensitivity and the noise come
// from the band (the lattice plan asked for the dense encoder before).
func TestReleasePlanBandedAboveDenseLimit(t *testing.T) {
	n, b := dpcore.DenseStepLimit+1, 3
	e := &mfnoise.BandedEncoder{N: n, Bands: b, Band: make([]float64, n*b)}
	for j := 0; j < n; j++ {
		e.Band[j*b] = 1
	}
	w, _ := dpcore.PrefixSum(n)
	s, err := e.For(w)
	if err != nil {
		t.Fatal(err)
	}
	p := Participation{K: 2, B: (n + 1) / 2}
	plan, err := PlanRelease(ReleaseRequest{Mechanism: "bandmf:3", Strategy: s, Participation: p, Epsilon: 1, Delta: 1e-6,
		Lattice: &Lattice{EncoderError: 0x1p-30, NormGrid: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	want := math.Sqrt2*(1+1e-9) + 2*math.Sqrt(float64(n))*0x1p-30
	if math.Abs(plan.NoiseSensitivity-want) > 1e-15 || !plan.Sensitivity.Exact {
		t.Errorf("noise sensitivity %v (%+v), want %v", plan.NoiseSensitivity, plan.Sensitivity, want)
	}
	src, err := plan.NoiseSource(10, noise.Options{Seed: &dpcore.Seed{1}})
	if err != nil || src.Kind() != noise.KindBanded || src.N() != n {
		t.Fatalf("noise source: %v", err)
	}
}
