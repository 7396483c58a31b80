package aggregate

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/accountant"
)

// Ledger is the live privacy record of an aggregator.
type Ledger struct {
	// EpsilonSpent is the epsilon of the releases made so far (at Delta);
	// it never decreases and reaches at most EpsilonBudget at the horizon.
	EpsilonSpent float64 `json:"epsilon_spent"`
	// EpsilonBudget is the target the noise is calibrated to.
	EpsilonBudget    float64 `json:"epsilon_budget"`
	EpsilonRemaining float64 `json:"epsilon_remaining"`
	Delta            float64 `json:"delta"`
	// Steps is the number of releases made; Horizon the number the budget
	// covers. A release past Horizon is refused.
	Steps   int `json:"steps"`
	Horizon int `json:"horizon"`
	// Operational counters. They are exact counts of contributions, not
	// protected by the guarantee. Rejected counts the contributions Add
	// refused (rules, dimension, non-finite values, ids); requests refused
	// before reaching Add, such as malformed JSON in dpserve, are not
	// counted.
	ContributionsAccepted uint64 `json:"contributions_accepted"`
	ContributionsRejected uint64 `json:"contributions_rejected"`
	ContributionsClipped  uint64 `json:"contributions_clipped"`

	Mechanism         string  `json:"mechanism"`
	Workload          string  `json:"workload"`
	Schema            string  `json:"schema"`
	Clip              float64 `json:"clip"`
	RecordNorm        float64 `json:"record_norm"`
	Sensitivity       float64 `json:"sensitivity"`
	SensitivityMethod string  `json:"sensitivity_method"`
	SensitivityExact  bool    `json:"sensitivity_exact"`
	NoiseMultiplier   float64 `json:"noise_multiplier"`
	// NoiseStd is sigma * RecordNorm * Sensitivity: the standard deviation
	// of each coordinate of s W, the scale of the noise B Z in releases.
	// With the exact arithmetic it is the discrete Gaussian's sigma_Z in
	// data units, sigma * Sensitivity * the record's exact bound on the
	// grid (RecordNorm + sqrt(dim)/2 grid units at most).
	NoiseStd   float64 `json:"noise_std"`
	Accountant string  `json:"accountant"`
	// Arithmetic is how releases are computed: "exact" (contributions on
	// an integer grid, the encoded sum in integers, exact discrete
	// Gaussian noise; docs/math.md) or "float" (tests only).
	Arithmetic string `json:"arithmetic"`
	// Grid is the spacing of the contribution lattice (Clip / 2^bits) and
	// EncoderGrid that of the encoder's entries, for the exact arithmetic.
	Grid        float64 `json:"grid,omitempty"`
	EncoderGrid float64 `json:"encoder_grid,omitempty"`
	// Covered is false when a fixed seed makes the noise known to whoever
	// has it: the releases are then not covered by the guarantee.
	Covered     bool     `json:"covered"`
	Assumptions []string `json:"assumptions"`
}

// Ledger returns the current ledger.
func (a *Aggregator) Ledger() Ledger {
	a.mu.RLock()
	s := a.snap
	a.mu.RUnlock()
	spent, err := a.epsAt(context.Background(), s.released)
	if err != nil {
		// No prefix bound: charge the whole horizon's epsilon.
		spent = a.cfg.Epsilon
	}
	l := Ledger{
		EpsilonSpent:          spent,
		EpsilonBudget:         a.cfg.Epsilon,
		EpsilonRemaining:      max(0, a.cfg.Epsilon-spent),
		Delta:                 a.cfg.Delta,
		Steps:                 s.released,
		Horizon:               a.n,
		ContributionsAccepted: s.cnt.accepted,
		ContributionsRejected: s.cnt.rejected,
		ContributionsClipped:  s.cnt.clipped,
		Mechanism:             a.cfg.Mechanism.Name(),
		Workload:              a.cfg.Workload.String(),
		Schema:                a.cfg.Mechanism.Schema().String(),
		Clip:                  a.cfg.Clip,
		RecordNorm:            a.norm,
		Sensitivity:           a.sens.Value,
		SensitivityMethod:     string(a.sens.Method),
		SensitivityExact:      a.sens.Exact,
		NoiseMultiplier:       a.sigma,
		NoiseStd:              a.noiseStd,
		Accountant:            "gaussian-exact (Balle & Wang 2018): one Gaussian mechanism with sensitivity 1 at noise multiplier sigma",
		Arithmetic:            "float",
		Covered:               a.cfg.Seed == nil,
	}
	mechAssumption := fmt.Sprintf("unamplified accounting: one Gaussian mechanism with sensitivity %.6g (%s) over the horizon of %d releases; epsilon spent after t releases uses the sensitivity of the first g releases, g the next power of two", a.sens.Value, a.sens.Method, a.n)
	if e := a.exact; e != nil {
		l.Accountant = accountant.DiscreteGaussianAccounting
		l.Arithmetic = "exact"
		l.Grid = 1 / e.scale
		l.EncoderGrid = math.Ldexp(1, -e.encBits)
		l.Sensitivity = e.sensQ
		mechAssumption = fmt.Sprintf("unamplified accounting: one multivariate discrete Gaussian mechanism on the integer encoded sums c~ X~ (encoder on a grid of 2^-%d, sensitivity %.6g >= that of the mechanism's encoder, %.6g (%s), plus the encoder's rounding; records on a grid of clip/2^%d with L2 norm at most %.6g grid units, enforced exactly) over the horizon of %d releases; epsilon spent after t releases uses the sensitivity of the first g releases, g the next power of two",
			e.encBits, e.sensQ, a.sens.Value, a.sens.Method, e.gridBits, e.normGrid, a.n)
	}
	l.Assumptions = []string{
		"adjacency: " + string(accountant.ZeroOut) + ": all contributions of one contributor id replaced by zero; the unit of privacy is one contributor id",
		fmt.Sprintf("participation: each contributor id joins at most k = %d steps, any two at least b = %d apart (%s), enforced by the aggregator", a.cfg.K, a.cfg.B, l.Schema),
		fmt.Sprintf("contributions clipped to L2 norm %g (record norm %g with the count coordinate)", a.cfg.Clip, a.norm),
		mechAssumption,
		"decoding and the workload (prefix, momentum-weighted or windowed sums, count, mean) are post-processing (Denisov et al. 2022, Thm 2.1)",
		"contributions_accepted, contributions_rejected and contributions_clipped are exact operational counters, not covered by the guarantee",
	}
	if a.cfg.Seed != nil {
		l.Assumptions = append(l.Assumptions, "noise: NOT private: a fixed seed was given (for tests only); anyone with the seed can remove the noise, so the releases are not covered by the guarantee")
	} else {
		l.Assumptions = append(l.Assumptions, accountant.AssumeNoise+" (seeded from crypto/rand)")
	}
	return l
}
