package privacy

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
)

// TestBandedSqrtPlanned: the proof mechanism bsr:BANDS, added as one file
// of mfnoise and one line of the names table, is planned by its structure
// alone: band sampling by default with amplified accounting at the
// per-participation sensitivity (the largest column norm of the dense
// encoder), exactly the epsilon of any other 4-banded encoder at the same
// sigma; fixed-order sampling unamplified at the schema's sensitivity; and
// Poisson sampling (one partition for 4 bands) refused.
func TestBandedSqrtPlanned(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 1200, 100, 240
	mech, err := ParseMechanism("bsr:4")
	if err != nil || mech != (mfnoise.BandedSqrt{Bands: 4}) {
		t.Fatalf("ParseMechanism(bsr:4) = %#v, %v", mech, err)
	}
	req := Request{Mechanism: mech, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, NoiseMultiplier: 1.1}
	p, _, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.Factorization()
	if err != nil {
		t.Fatal(err)
	}
	single, err := sensitivity.Of(f.Encoder, dpcore.SingleParticipation())
	if err != nil {
		t.Fatal(err)
	}
	if p.Sampling != SamplingBandPoisson || !p.Amplified || p.Accounting.Bands != 4 ||
		relErr(p.Sensitivity.Value, single.Value) > 1e-12 || relErr(p.Loss, f.LossAt(single.Value)) > 1e-12 {
		t.Fatalf("plan %v: sensitivity %v (dense %v), loss %v (dense %v)", p, p.Sensitivity.Value, single.Value, p.Loss, f.LossAt(single.Value))
	}
	ref := req
	ref.Mechanism = mfnoise.BandedToeplitz{Bands: 4}
	q, _, err := NewPlan(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if p.Epsilon != q.Epsilon || p.Composition() != q.Composition() {
		t.Fatalf("bsr:4 epsilon %v (%+v), toeplitz:4 %v (%+v)", p.Epsilon, p.Composition(), q.Epsilon, q.Composition())
	}

	fixed := req
	fixed.Sampling = SamplingFixedOrder
	p, _, err = NewPlan(ctx, fixed)
	if err != nil {
		t.Fatal(err)
	}
	dense, err := sensitivity.Of(f.Encoder, p.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if p.Amplified || relErr(p.Sensitivity.Value, dense.Value) > 1e-12 || !p.Sensitivity.Exact {
		t.Fatalf("fixed-order plan %v: sensitivity %+v, dense %+v", p, p.Sensitivity, dense)
	}

	poisson := req
	poisson.Sampling = SamplingPoisson
	if _, _, err := NewPlan(ctx, poisson); !errors.Is(err, ErrRefused) {
		t.Fatalf("bsr:4 under Poisson sampling: %v", err)
	}
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}
