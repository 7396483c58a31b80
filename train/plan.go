package train

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/sampler"
)

// buildPlan asks the planner for the plan of a private run and the sampler
// that realizes it. w is the optimizer's workload over cfg.Steps.
func buildPlan(ctx context.Context, cfg *Config, w dpcore.Workload, users *userLevel) (*privacy.Plan, sampler.Sampler, error) {
	plan, smp, err := privacy.NewPlan(ctx, planRequest(cfg, w, users))
	if err == nil && !(plan.NoiseStd <= maxNoiseStd) {
		// More noise is always private, but the parameters are float32:
		// float32(std) would be +Inf and every update non-finite.
		return nil, nil, invalidf("noise std %.3g (noise multiplier %g times the clip norm and the sensitivity) is beyond the float32 arithmetic of the model; the largest usable is %g", plan.NoiseStd, plan.NoiseMultiplier, maxNoiseStd)
	}
	return plan, smp, err
}

// checkPlan refuses, with the error New would give, what the planner
// refuses of a private example-level run before it builds a
// factorization (privacy.CheckRequest). A user-level run is left to New:
// its plan counts the users, dealt from the data there.
func (c *Config) checkPlan() error {
	if c.NonPrivate || c.Privacy.UserBound != nil {
		return nil
	}
	return privacy.CheckRequest(planRequest(c, dpcore.Workload{}, nil))
}

// planRequest is the planner's request for a private run of cfg: the
// configuration's own, completed with what the run derives from its data,
// its optimizer and its features. w is the optimizer's workload over the
// run's steps (the zero Workload: prefix sums).
func planRequest(cfg *Config, w dpcore.Workload, users *userLevel) privacy.Request {
	req := cfg.Privacy
	req.Examples = cfg.Data.Train.Len()
	req.Preprocessing = append(slices.Clip(req.Preprocessing), preprocessing(cfg)...)
	req.PostProcessing = append(slices.Clip(req.PostProcessing), postprocessing(cfg)...)
	req.Quantile = quantileRelease(cfg.Privacy.Quantile, cfg.Privacy.Batch)
	req.NotCovered = append(slices.Clip(req.NotCovered), "step metrics "+strings.Join(stepNotPrivate(), ", ")+" (norm_quantiles include the largest per-example gradient norm)")
	switch {
	case users != nil:
		req.Unit, req.Examples = privacy.UnitUser, users.users.Len()
	case cfg.Data.Train.Owners != nil && req.UserBound == nil:
		// An example-level run over owned data says what it means per
		// owner.
		if us, err := cfg.Data.Train.Users(); err == nil {
			req.MaxOwnerExamples = us.MaxExamples()
		}
	}
	if cfg.Optimizer.Workload == WorkloadOptimizer {
		req.Workload = w
	}
	switch {
	case cfg.Data.Test == nil:
		req.NotCovered = append(req.NotCovered, "evaluations on the training set (no test set): "+strings.Join(evalTrainNotPrivate(), ", "))
	case cfg.Data.Validation:
		req.NotCovered = append(req.NotCovered, "evaluations on the validation set (held out of the private training data): "+strings.Join(evalValidationNotPrivate(), ", "))
	}
	return req
}

// maxNoiseStd is the largest noise standard deviation a step adds to its
// float32 gradient sum: noise draws stay below 1e3 std, so sums and
// updates stay far below float32's largest value, 3.4e38.
const maxNoiseStd = 1e30

// preprocessing describes cfg's per-example transform for the ledger.
func preprocessing(cfg *Config) []string {
	if cfg.Data.Features != FeaturesScatter {
		return cfg.Data.Augment.note()
	}
	return append(cfg.Data.Augment.note(), fmt.Sprintf("scattering transform (Morlet wavelets, J = %d, L = %d; no parameters) of every example", scatterJ, scatterL))
}

// postprocessing describes cfg's post-processing for the ledger.
func postprocessing(cfg *Config) []string {
	var out []string
	if cfg.Optimizer.Rule == OptimizerAdam {
		out = append(out, "Adam: its moments and updates are computed from the privatized gradients only")
	}
	if e := cfg.Optimizer.EMA; e != nil {
		out = append(out, fmt.Sprintf("exponential moving average of the parameters (decay %g) evaluated and returned as the model", e.Decay))
	}
	return out
}
