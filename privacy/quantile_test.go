package privacy

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// Adaptive clipping's count release is accounted as Andrew et al.'s joint
// event for every amplified plan: the count of step t uses the step's own
// sample, so gradient and count are one subsampled Gaussian of multiplier
// sigma_j = (sigma_g^-2 + (2 sigma_b)^-2)^-1/2. With band sampling the
// plan's epsilon is that of the BandMF event at its noise multiplier,
// computed here independently, the gradient's multiplier sigma_g gives a
// joint multiplier of at least the plan's, and the joint event at the
// gradient's actual multiplier is within the plan's epsilon (it was 25%
// over when the counts were composed as a second, independently sampled
// mechanism). For DP-SGD likewise.
func TestQuantileReleaseAccounted(t *testing.T) {
	ctx := context.Background()
	const m, batch, n, bands = 6000, 200, 60, 4
	const sigma = 1.1
	q := &QuantileRelease{Target: 0.6, NoiseStd: 2, LearningRate: 0.2}
	base := Request{Examples: m, Batch: batch, Steps: n, ClipNorm: 0.5, NoiseMultiplier: sigma, Mechanism: mfnoise.BandMF{Bands: bands}, Accountant: RDP}
	plain, _, err := NewPlan(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	withQ := base
	withQ.Quantile = q
	adaptive, _, err := NewPlan(ctx, withQ)
	if err != nil {
		t.Fatal(err)
	}
	acct, _ := RDP.New()
	jointEps := func(gradSigma float64) float64 {
		t.Helper()
		sj := 1 / math.Hypot(1/gradSigma, 1/(2*q.NoiseStd))
		ev, err := accountant.BandMFEvent(sj, m, batch, bands, n)
		if err != nil {
			t.Fatal(err)
		}
		e, err := acct.Epsilon(ev, adaptive.Delta)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if got := jointEps(adaptive.GradientNoiseMultiplier); got > adaptive.Epsilon {
		t.Fatalf("band sampling with adaptive clipping: plan epsilon %v, but gradient multiplier %v and count noise %v are jointly epsilon %v",
			adaptive.Epsilon, adaptive.GradientNoiseMultiplier, q.NoiseStd, got)
	}
	grad, err := accountant.BandMFEvent(sigma, m, batch, bands, n)
	if err != nil {
		t.Fatal(err)
	}
	want, err := acct.Epsilon(grad, adaptive.Delta)
	if err != nil {
		t.Fatal(err)
	}
	if adaptive.Epsilon != want || adaptive.Epsilon != plain.Epsilon {
		t.Fatalf("band sampling with adaptive clipping: plan epsilon %v, joint BandMF event at sigma %v, plan without the count %v", adaptive.Epsilon, want, plain.Epsilon)
	}
	wantGS := 1 / math.Sqrt(1/(sigma*sigma)-1/(4*q.NoiseStd*q.NoiseStd))
	if math.Abs(adaptive.GradientNoiseMultiplier-wantGS) > 1e-12*wantGS || math.Abs(adaptive.NoiseStd-adaptive.GradientNoiseMultiplier*base.ClipNorm*adaptive.Sensitivity.Value) > 1e-12*wantGS {
		t.Fatalf("band sampling: gradient multiplier %v (want %v), std %v", adaptive.GradientNoiseMultiplier, wantGS, adaptive.NoiseStd)
	}
	// Calibrated, the joint multiplier meets the target and the gradient
	// pays with more noise than without the count.
	calQ, calP := withQ, base
	calQ.NoiseMultiplier, calP.NoiseMultiplier = 0, 0
	calQ.Epsilon, calP.Epsilon = 2, 2
	a, _, err := NewPlan(ctx, calQ)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := NewPlan(ctx, calP)
	if err != nil {
		t.Fatal(err)
	}
	if !(a.GradientNoiseMultiplier > b.NoiseMultiplier) || a.Epsilon > 2 || jointEps(a.GradientNoiseMultiplier) > 2 {
		t.Fatalf("calibrated with the count release: gradient sigma %v (eps %v, joint %v), without %v", a.GradientNoiseMultiplier, a.Epsilon, jointEps(a.GradientNoiseMultiplier), b.NoiseMultiplier)
	}
	// 2 sigma_b <= sigma leaves the gradient nothing: refused here too.
	tight := withQ
	tight.Quantile = &QuantileRelease{Target: 0.5, NoiseStd: sigma / 2, LearningRate: 0.2}
	if _, _, err := NewPlan(ctx, tight); !errors.Is(err, ErrRefused) {
		t.Fatalf("band sampling, count noise sigma/2: want a refusal, got %v", err)
	}

	// DP-SGD: Thm. 1, the same event, a larger gradient noise.
	base.Mechanism, withQ.Mechanism = mfnoise.DPSGD{}, mfnoise.DPSGD{}
	plain, _, err = NewPlan(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	adaptive, _, err = NewPlan(ctx, withQ)
	if err != nil {
		t.Fatal(err)
	}
	if adaptive.Epsilon != plain.Epsilon || math.Abs(adaptive.GradientNoiseMultiplier-wantGS) > 1e-12*wantGS ||
		math.Abs(adaptive.NoiseStd-wantGS*base.ClipNorm) > 1e-12*wantGS {
		t.Fatalf("dpsgd with adaptive clipping: epsilon %v (without %v), gradient multiplier %v (want %v), std %v", adaptive.Epsilon, plain.Epsilon, adaptive.GradientNoiseMultiplier, wantGS, adaptive.NoiseStd)
	}
	// The joint mechanism is the Gaussian of multiplier sigma: the
	// per-step sensitivities 1/sigma_Delta and 1/(2 sigma_b) add in
	// quadrature to 1/sigma.
	if got := math.Hypot(1/adaptive.GradientNoiseMultiplier, 1/(2*q.NoiseStd)); math.Abs(got-1/sigma) > 1e-12 {
		t.Fatalf("joint sensitivity %v, want %v", got, 1/sigma)
	}
	// A count noise that leaves nothing for the gradient is refused.
	withQ.Quantile = &QuantileRelease{Target: 0.5, NoiseStd: sigma / 2, LearningRate: 0.2}
	if _, _, err := NewPlan(ctx, withQ); !errors.Is(err, ErrRefused) {
		t.Fatalf("count noise sigma/2: want a refusal, got %v", err)
	}
	// Unamplified accounting is refused; bad settings are invalid.
	withQ.Quantile, withQ.Sampling = q, SamplingFixedOrder
	if _, _, err := NewPlan(ctx, withQ); !errors.Is(err, ErrRefused) {
		t.Fatalf("fixed order: want a refusal, got %v", err)
	}
	withQ.Sampling = ""
	for _, bad := range []QuantileRelease{{Target: 1, NoiseStd: 1, LearningRate: 1}, {Target: 0.5, NoiseStd: 0, LearningRate: 1}, {Target: 0.5, NoiseStd: 1, LearningRate: math.NaN()}} {
		withQ.Quantile = &bad
		if _, _, err := NewPlan(ctx, withQ); !errors.Is(err, dpcore.ErrInvalid) {
			t.Fatalf("%+v: want dpcore.ErrInvalid, got %v", bad, err)
		}
	}
}

// The reproduction (train run -mechanism bandmf:4 -sampling
// band-poisson -steps 60 -batch 200 -epsilon 3 -clip-quantile-noise 1 on
// 6000 examples): the gradient's noise multiplier, joined with the count's
// noise, is within epsilon 3 by the accounting "train account" does
// (privacy.Account). Composing the counts as their own mechanism gave the
// gradient 1.2415, jointly 1.0548, epsilon 3.745.
func TestQuantileJointWithinBudget(t *testing.T) {
	ctx := context.Background()
	const m, batch, n, bands, eps, countNoise = 6000, 200, 60, 4, 3.0, 1.0
	for _, mech := range []Mechanism{mfnoise.BandMF{Bands: bands}, mfnoise.DPSGD{}} {
		p, _, err := NewPlan(ctx, Request{Examples: m, Batch: batch, Steps: n, ClipNorm: 1, Epsilon: eps, Mechanism: mech,
			Quantile: &QuantileRelease{Target: 0.5, NoiseStd: countNoise, LearningRate: 0.2}})
		if err != nil {
			t.Fatal(err)
		}
		joint := 1 / math.Hypot(1/p.GradientNoiseMultiplier, 1/(2*countNoise))
		req := AccountRequest{Kind: AccountBandMF, Examples: m, Batch: batch, Steps: n, Bands: bands, Sigma: joint, Delta: p.Delta}
		if _, ok := mech.(mfnoise.DPSGD); ok {
			req.Kind, req.Bands = AccountDPSGD, 0
		}
		res, err := Account(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: plan sigma %.6g, gradient sigma %.6g, joint %.6g: epsilon %.6g", mech, p.NoiseMultiplier, p.GradientNoiseMultiplier, joint, res.Epsilon)
		if res.Epsilon > eps {
			t.Errorf("%s: gradient noise multiplier %.6g with count noise %g is jointly %.6g, epsilon %.6g > %g", mech, p.GradientNoiseMultiplier, countNoise, joint, res.Epsilon, eps)
		}
	}
}

// bandmf:auto and toeplitz:auto choose bands by the noise the gradient
// gets: with adaptive clipping, the joint rule's GradientSigma(sigma_b).
func TestQuantileAutoBandsScoreTheGradient(t *testing.T) {
	ctx := context.Background()
	q := &QuantileRelease{Target: 0.5, NoiseStd: 1, LearningRate: 0.2}
	p, _, err := NewPlan(ctx, Request{Examples: 6000, Batch: 200, Steps: 60, ClipNorm: 1, Epsilon: 3,
		Mechanism: mfnoise.BandedToeplitz{Auto: true}, Accountant: RDP, Quantile: q})
	if err != nil {
		t.Fatal(err)
	}
	best := math.Inf(1)
	for _, row := range p.BandTable.Table {
		if row.Err != "" {
			continue
		}
		gs, err := q.GradientSigma(row.Sigma)
		if err != nil {
			t.Fatal(err)
		}
		if row.Score != gs*gs*row.Loss {
			t.Errorf("%d bands: score %v, want the gradient's %v^2 times loss %v", row.Bands, row.Score, gs, row.Loss)
		}
		best = math.Min(best, row.Score)
	}
	if c := p.BandTable.Chosen(); c.Score != best || c.Bands != p.mechanism.Structure().Bands && c.Bands > 1 {
		t.Errorf("chose %d bands (score %v), best score %v, planned %s", c.Bands, c.Score, best, p.Mechanism)
	}
}
