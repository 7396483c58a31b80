package privacy

import (
	"fmt"
	"math"
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
// Its cost enters the plan by one rule, for every amplified plan (DP-SGD,
// and a b-banded encoder under band sampling): r_t is computed on the
// step's own sampled batch, so an example's participation is one draw of
// the sampler that enters both the gradient and the count, and the pair,
// each part scaled to unit noise, is one Gaussian mechanism on the
// concatenated vector (Andrew et al. Thm. 1). Its sensitivity is
// (sigma_g^-2 + (2 NoiseStd)^-2)^(1/2) for a gradient of noise multiplier
// sigma_g per unit of the mechanism's per-participation sensitivity, so
// the plan's event at the joint multiplier sigma is unchanged, and the
// gradient gets sigma_g = (sigma^-2 - (2 NoiseStd)^-2)^(-1/2)
// (GradientSigma; docs/math.md §9.3 says why the rows of a banded
// encoder a participation reaches and its count form one block).
// Accounting the count as a second, independently sampled mechanism would
// undercount: both parts are present or absent together. Unamplified
// plans are refused.
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

// GradientSigma is the noise multiplier the gradient gets when the plan's
// joint noise multiplier is sigma: sigma_g = (sigma^-2 - (2
// sigma_b)^-2)^(-1/2), so that gradient and count together are the
// Gaussian mechanism of multiplier sigma (JointSigma(sigma_g) = sigma). It
// refuses a count noise too small to leave the gradient any budget
// (2 sigma_b <= sigma) and rounds sigma_g up so that the joint multiplier
// is at least sigma in float64 too.
func (q *QuantileRelease) GradientSigma(sigma float64) (float64, error) {
	if q == nil {
		return sigma, nil
	}
	rest := 1/(sigma*sigma) - 1/(4*q.NoiseStd*q.NoiseStd)
	if !(rest > 0) || math.IsInf(1/math.Sqrt(rest), 0) {
		return 0, refuse(RuleBudget, "adaptive clipping: count noise %g leaves no budget for the gradient at noise multiplier %.6g: the count and the gradient are one Gaussian mechanism, so the count noise must exceed %.6g, half the noise multiplier (raise -clip-quantile-noise or the noise multiplier)", q.NoiseStd, sigma, sigma/2)
	}
	// Rounded up until the joint multiplier is at least sigma in the
	// arithmetic done, so the plan's event holds for the noise added.
	gs := 1 / math.Sqrt(rest)
	for q.JointSigma(gs) < sigma {
		gs = math.Nextafter(gs, math.Inf(1))
	}
	return gs, nil
}

// JointSigma is the noise multiplier of the one Gaussian mechanism that a
// gradient of noise multiplier gradSigma and the count release form,
// (gradSigma^-2 + (2 sigma_b)^-2)^(-1/2): the inverse of GradientSigma.
func (q *QuantileRelease) JointSigma(gradSigma float64) float64 {
	if q == nil {
		return gradSigma
	}
	return 1 / math.Hypot(1/gradSigma, 1/(2*q.NoiseStd))
}

// note is the ledger's line for the release under c.
func (q *QuantileRelease) note(c Composition, sigma, gradSigma float64) string {
	head := fmt.Sprintf("adaptive clipping (Andrew et al. 2021): each step releases the count of examples with gradient norm <= C_t, centred (sensitivity 1/2) with noise std %g, and moves C_t geometrically (rate %g) towards the %g quantile; the clip norm is a function of released values only", q.NoiseStd, q.LearningRate, q.Target)
	block := "per step"
	if c.Partitions > 1 {
		block = "per participation (the encoder's rows it reaches and its step's count)"
	}
	return head + fmt.Sprintf("; count and clipped sum use the same sample, so %s they are one Gaussian mechanism (Thm. 1) with noise multiplier %.6g, the plan's: the gradient's noise multiplier is %.6g = (%.6g^-2 - (2*%g)^-2)^-1/2", block, sigma, gradSigma, sigma, q.NoiseStd)
}

// setQuantile is the plan's hook for r.Quantile, before sigma is
// calibrated: it checks the release and refuses an unamplified plan. The
// plan's event is unchanged (the joint mechanism's, at sigma).
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
	return nil
}

// quantileNoise is the plan's hook after sigma is fixed: the gradient's
// noise std (NoiseStd) and the ledger's note.
func (p *Plan) quantileNoise(as []string) ([]string, error) {
	if p.Quantile == nil {
		return as, nil
	}
	gs, err := p.Quantile.GradientSigma(p.NoiseMultiplier)
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
