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

// Adaptive clipping's count release is accounted: with band sampling the
// plan's epsilon is the composition, computed here independently, of the
// BandMF event and ceil(n/b) sampled Gaussians of multiplier 2 sigma_b, and
// exceeds the plan's without it at the same sigma; calibrated to a target
// it needs a larger sigma. For DP-SGD the plan's epsilon is unchanged and
// the gradient's noise multiplier is Andrew et al.'s sigma_Delta.
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
	grad, err := accountant.BandMFEvent(sigma, m, batch, bands, n)
	if err != nil {
		t.Fatal(err)
	}
	rate := float64(batch) / float64(m/bands)
	counts := accountant.SelfComposed(accountant.PoissonSampled(rate, accountant.Gaussian(2*q.NoiseStd)), (n+bands-1)/bands)
	want, err := acct.Epsilon(accountant.Composed(grad, counts), adaptive.Delta)
	if err != nil {
		t.Fatal(err)
	}
	if adaptive.Epsilon != want {
		t.Fatalf("band sampling with adaptive clipping: plan epsilon %v, independent composition %v", adaptive.Epsilon, want)
	}
	if !(adaptive.Epsilon > plain.Epsilon) {
		t.Fatalf("the count release costs nothing: %v with it, %v without", adaptive.Epsilon, plain.Epsilon)
	}
	if adaptive.NoiseStd != plain.NoiseStd || adaptive.GradientNoiseMultiplier != sigma {
		t.Fatalf("composed separately, the gradient's noise should be unchanged: std %v vs %v, multiplier %v", adaptive.NoiseStd, plain.NoiseStd, adaptive.GradientNoiseMultiplier)
	}
	// Calibrated to the same epsilon, the plan pays with more noise.
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
	if !(a.NoiseMultiplier > b.NoiseMultiplier) || a.Epsilon > 2 {
		t.Fatalf("calibrated with the count release: sigma %v (eps %v), without %v", a.NoiseMultiplier, a.Epsilon, b.NoiseMultiplier)
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
	wantGS := 1 / math.Sqrt(1/(sigma*sigma)-1/(4*q.NoiseStd*q.NoiseStd))
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
