package train

import (
	"context"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/sampler"
)

// Plan is the run's privacy plan (package privacy): the sampler, the
// mechanism, its sensitivity, the accounting and the ledger, checked before
// the first step.
type Plan = privacy.Plan

// deriveSeed gives each consumer its own 32-byte seed from the run's seed,
// or nil (crypto/rand) when the run has none.
func deriveSeed(master []byte, label string) *dpcore.Seed { return privacy.DeriveSeed(master, label) }

// buildPlan asks the planner for the plan of a private run and the sampler
// that realizes it. w is the optimizer's workload over cfg.Steps.
func buildPlan(ctx context.Context, cfg *Config, w dpcore.Workload, users *userLevel) (*Plan, sampler.Sampler, error) {
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
	if c.NonPrivate || c.UserLevel {
		return nil
	}
	return privacy.CheckRequest(planRequest(c, dpcore.Workload{}, nil))
}

// planRequest is the planner's request for a private run of cfg. w is the
// optimizer's workload over cfg.Steps (the zero Workload: prefix sums).
func planRequest(cfg *Config, w dpcore.Workload, users *userLevel) privacy.Request {
	req := privacy.Request{
		Mechanism: cfg.Mechanism,
		Examples:  cfg.Train.Len(), Batch: cfg.Batch, Steps: cfg.Steps,
		Sampling: cfg.Sampling, Partitions: cfg.Bands, ClipNorm: cfg.ClipNorm,
		NoiseMultiplier: cfg.NoiseMultiplier, Epsilon: cfg.Epsilon, Delta: cfg.Delta,
		Accountant: cfg.Accountant, Seed: cfg.Seed, InsecureSeed: cfg.InsecureSeed,
		Preprocessing: preprocessing(cfg), PostProcessing: postprocessing(cfg),
		Quantile:   quantileRelease(cfg),
		NotCovered: []string{"step metrics " + strings.Join(stepNotPrivate(), ", ") + " (norm_quantiles include the largest per-example gradient norm)"},
	}
	switch {
	case users != nil:
		req.Unit, req.UserBound, req.Examples = privacy.UnitUser, users.bound(), users.users.Len()
	case cfg.Train.Owners != nil:
		// An example-level run over owned data says what it means per
		// owner.
		if us, err := cfg.Train.Users(); err == nil {
			req.MaxOwnerExamples = us.MaxExamples()
		}
	}
	if cfg.Workload == WorkloadOptimizer {
		req.Workload = w
	}
	switch {
	case cfg.Test == nil:
		req.NotCovered = append(req.NotCovered, "evaluations on the training set (no test set): "+strings.Join(evalTrainNotPrivate(), ", "))
	case cfg.Validation:
		req.NotCovered = append(req.NotCovered, "evaluations on the validation set (held out of the private training data): "+strings.Join(evalValidationNotPrivate(), ", "))
	}
	if cfg.CacheDir != "" {
		req.CacheDir = cfg.CacheDir
	}
	return req
}

// maxNoiseStd is the largest noise standard deviation a step adds to its
// float32 gradient sum: noise draws stay below 1e3 std, so sums and
// updates stay far below float32's largest value, 3.4e38.
const maxNoiseStd = 1e30
