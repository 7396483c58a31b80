package privacy

import (
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/accountant"
)

// QuantileRelease is the private quantile estimate of adaptive clipping
// (Andrew et al. 2021, "Differentially Private Learning with Adaptive
// Clipping", Alg. 1): every step releases the count of the step's examples
// whose gradient norm is at most the current clip norm C_t, centred and
// noised,
//
//	r_t = sum_i (b_i - 1/2) + N(0, NoiseStd^2),  b_i = 1[||g_i|| <= C_t],
//
// and moves the clip norm geometrically towards the Target quantile:
// C_{t+1} = C_t exp(-LearningRate (r_t/B + 1/2 - Target)), B the expected
// batch. Adding or removing one example moves the centred count by 1/2, so
// one release is a Gaussian mechanism with noise multiplier
// 2 NoiseStd, run on the step's (sampled) batch.
//
// Its cost enters the plan one of two ways. For DP-SGD (amplified, one
// partition) the count and the clipped sum of a step are one Gaussian
// mechanism on the concatenated vector (Andrew et al. Thm. 1): the plan's
// event is unchanged, and the gradient noise multiplier becomes
// sigma_Delta = (sigma^-2 - (2 NoiseStd)^-2)^(-1/2), so that the pair
// spends what sigma alone would. For a correlated-noise mechanism with
// band sampling the releases are composed as their own sampled Gaussian
// mechanism, one composition for each of the mechanism's (ceil(n/b), rate
// B/floor(m/b)), with the plan's accountant; sigma is calibrated for the
// composition. Unamplified plans are refused.
type QuantileRelease struct {
	// Target is the quantile gamma of the per-example gradient norms the
	// clip norm tracks, in (0, 1).
	Target float64 `json:"target_quantile"`
	// NoiseStd is sigma_b, the standard deviation of the noise on the
	// count (> 0).
	NoiseStd float64 `json:"count_noise_std"`
	// LearningRate is eta_C of the geometric update (> 0).
	LearningRate float64 `json:"learning_rate"`
}

// Check refuses a release that cannot run.
func (q *QuantileRelease) Check() error {
	switch {
	case !(q.Target > 0 && q.Target < 1):
		return invalidf("adaptive clipping: target quantile %v must lie in (0,1)", q.Target)
	case !(q.NoiseStd > 0) || math.IsInf(q.NoiseStd, 0):
		return invalidf("adaptive clipping: count noise %v must be positive and finite", q.NoiseStd)
	case !(q.LearningRate > 0) || math.IsInf(q.LearningRate, 0):
		return invalidf("adaptive clipping: learning rate %v must be positive and finite", q.LearningRate)
	}
	return nil
}

// joint reports whether c's releases are accounted jointly with the
// gradient (Andrew et al. Thm. 1): DP-SGD.
func (q *QuantileRelease) joint(c Composition) bool {
	return c.Amplified && c.Partitions <= 1
}

// Event is the accounting event of the first steps releases under
// composition c, to compose with the gradient's: nil when c accounts them
// jointly with the gradient (DP-SGD).
func (q *QuantileRelease) Event(c Composition, steps int) (accountant.Event, error) {
	if q == nil || q.joint(c) {
		return nil, nil
	}
	if !c.Amplified {
		return nil, refuse(RuleAmplification, "adaptive clipping needs amplified accounting (Poisson or band sampling)")
	}
	return accountant.SelfComposed(accountant.PoissonSampled(c.Rate(), accountant.Gaussian(2*q.NoiseStd)), c.Compositions(steps)), nil
}

// GradientSigma is the noise multiplier the gradient gets when the plan's
// budget is sigma: sigma itself when the releases are composed on their
// own, sigma_Delta = (sigma^-2 - (2 sigma_b)^-2)^(-1/2) for DP-SGD. It
// refuses a count noise too small to leave the gradient any budget
// (2 sigma_b <= sigma).
func (q *QuantileRelease) GradientSigma(c Composition, sigma float64) (float64, error) {
	if q == nil || !q.joint(c) {
		return sigma, nil
	}
	rest := 1/(sigma*sigma) - 1/(4*q.NoiseStd*q.NoiseStd)
	if !(rest > 0) {
		return 0, refuse(RuleBudget, "adaptive clipping: count noise %g leaves no budget for the gradient at noise multiplier %g (DP-SGD needs count noise above %g, half of it)", q.NoiseStd, sigma, sigma/2)
	}
	return 1 / math.Sqrt(rest), nil
}

// note is the ledger's line for the release under c.
func (q *QuantileRelease) note(c Composition, sigma, gradSigma float64) string {
	head := fmt.Sprintf("adaptive clipping (Andrew et al. 2021): each step releases the count of examples with gradient norm <= C_t, centred (sensitivity 1/2) with noise std %g, and moves C_t geometrically (rate %g) towards the %g quantile; the clip norm is a function of released values only", q.NoiseStd, q.LearningRate, q.Target)
	if q.joint(c) {
		return head + fmt.Sprintf("; count and clipped sum are one Gaussian mechanism with noise multiplier %.6g (Thm. 1): the gradient's noise multiplier is %.6g", sigma, gradSigma)
	}
	return head + fmt.Sprintf("; composed as its own sampled Gaussian mechanism (noise multiplier %g, rate %.6g, one release per composition) with the gradient's", 2*q.NoiseStd, c.Rate())
}

// setQuantile is the plan's hook for r.Quantile, before sigma is
// calibrated: the composition then includes the releases.
func (p *Plan) setQuantile(q *QuantileRelease) error {
	if q == nil {
		return nil
	}
	if err := q.Check(); err != nil {
		return err
	}
	if !p.Amplified {
		return refuse(RuleAmplification, "adaptive clipping needs amplified accounting (Poisson or band sampling), not %s sampling", p.Sampling)
	}
	c := *q
	p.Quantile = &c
	p.composition.Quantile = &c
	return nil
}

// quantileNoise is the plan's hook after sigma is fixed: the gradient's
// noise std (NoiseStd) and the ledger's note.
func (p *Plan) quantileNoise(as []string) ([]string, error) {
	if p.Quantile == nil {
		return as, nil
	}
	gs, err := p.Quantile.GradientSigma(p.composition, p.NoiseMultiplier)
	if err != nil {
		return nil, err
	}
	p.GradientNoiseMultiplier = gs
	p.NoiseStd = gs * p.ClipNorm * p.Sensitivity.Value
	return append(as, p.Quantile.note(p.composition, p.NoiseMultiplier, gs)), nil
}

// quantileParams adds the release's settings to the ledger's parameters.
func (p *Plan) quantileParams(params map[string]any) {
	if q := p.Quantile; q != nil {
		params["adaptive_clipping"] = map[string]any{"target_quantile": q.Target, "count_noise_std": q.NoiseStd, "learning_rate": q.LearningRate, "initial_clip_norm": p.ClipNorm}
		params["gradient_noise_multiplier"] = p.GradientNoiseMultiplier
	}
}
