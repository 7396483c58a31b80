package privacy

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// TestToeplitzPlanMatchesDense: for every Toeplitz mechanism and sampling
// it allows, the plan made from the O(n) description has the sensitivity
// (value and exactness) and loss of its dense factorization, computed the
// way plans of other mechanisms are.
func TestToeplitzPlanMatchesDense(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 1200, 100, 240
	for _, name := range []string{"dpsgd", "sqrt", "toeplitz:3", "blt:2", "bisr:4"} {
		for _, samp := range []Sampling{SamplingAuto, SamplingFixedOrder} {
			mech, err := ParseMechanism(name)
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := NewPlan(ctx, Request{Mechanism: mech, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, NoiseMultiplier: 1, Sampling: samp})
			if err != nil {
				t.Fatalf("%s/%s: %v", name, samp, err)
			}
			if _, ok := p.Strategy().(*toeplitz.Strategy); !ok {
				t.Fatalf("%s/%s: plan holds no Toeplitz mechanism", name, samp)
			}
			f, err := p.Factorization()
			if err != nil {
				t.Fatal(err)
			}
			schema := p.Schema
			if p.Amplified {
				schema = dpcore.SingleParticipation()
			}
			dense, err := sensitivity.Of(f.Encoder, schema)
			if err != nil {
				t.Fatal(err)
			}
			rel := func(a, b float64) float64 { return math.Abs(a-b) / b }
			if rel(p.Sensitivity.Value, dense.Value) > 1e-12 || p.Sensitivity.Exact != dense.Exact {
				t.Errorf("%s/%s (%s): sensitivity %v exact %v, dense %v exact %v", name, samp, p.Schema, p.Sensitivity.Value, p.Sensitivity.Exact, dense.Value, dense.Exact)
			}
			if want := f.LossAt(p.Sensitivity.Value); rel(p.Loss, want) > 1e-10 {
				t.Errorf("%s/%s: loss %v, dense %v", name, samp, p.Loss, want)
			}
		}
	}
}

// TestToeplitzPlanBeyondDenseLimit: Toeplitz mechanisms plan at n = 20000
// steps, past dpcore.DenseStepLimit, without an n x n matrix (before,
// every one was refused by the dense limit); only asking for the dense
// factorization is refused, with the memory it would need.
func TestToeplitzPlanBeyondDenseLimit(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 20000, 100, 20000
	if n <= dpcore.DenseStepLimit {
		t.Fatalf("n = %d is within the dense limit %d", n, dpcore.DenseStepLimit)
	}
	for _, name := range []string{"dpsgd", "sqrt", "toeplitz:4", "blt:4", "bisr:4"} {
		mech, err := ParseMechanism(name)
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := NewPlan(ctx, Request{Mechanism: mech, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, Epsilon: 4})
		if err != nil {
			t.Fatalf("%s at n = %d: %v", name, n, err)
		}
		if st, ok := p.Strategy().(*toeplitz.Strategy); !ok || st.Steps() != n || !(p.Sensitivity.Value >= 1) || !(p.Loss > 0) || !(p.Epsilon <= 4) {
			t.Fatalf("%s: plan %v", name, p)
		}
		if _, err := p.Factorization(); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "GiB") {
			t.Fatalf("%s: dense factorization at n = %d: %v, want a refusal with the memory", name, n, err)
		}
	}
}
