package aggregate

import (
	"context"
	"math"
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

// Ledger returns the current ledger: the counters, and the planner's
// claim (privacy.ReleasePlan.Claim) with the epsilon spent so far.
func (a *Aggregator) Ledger() Ledger {
	a.mu.RLock()
	s := a.snap
	a.mu.RUnlock()
	p := a.plan
	spent, err := a.epsAt(context.Background(), s.released)
	if err != nil {
		// No prefix bound: charge the whole horizon's epsilon.
		spent = p.Epsilon
	}
	claim := p.Claim(a.cfg.Clip, a.norm)
	l := Ledger{
		EpsilonSpent:          spent,
		EpsilonBudget:         p.Epsilon,
		EpsilonRemaining:      max(0, p.Epsilon-spent),
		Delta:                 p.Delta,
		Steps:                 s.released,
		Horizon:               p.Horizon,
		ContributionsAccepted: s.cnt.accepted,
		ContributionsRejected: s.cnt.rejected,
		ContributionsClipped:  s.cnt.clipped,
		Mechanism:             p.Mechanism,
		Workload:              a.cfg.Workload.String(),
		Schema:                p.Schema.String(),
		Clip:                  a.cfg.Clip,
		RecordNorm:            a.norm,
		Sensitivity:           p.NoiseSensitivity,
		SensitivityMethod:     string(p.Sensitivity.Method),
		SensitivityExact:      p.Sensitivity.Exact,
		NoiseMultiplier:       p.NoiseMultiplier,
		NoiseStd:              a.noiseStd,
		Accountant:            claim.Accountant,
		Arithmetic:            claim.Arithmetic,
		Covered:               claim.Covered,
		Assumptions:           claim.Assumptions,
	}
	if e := a.exact; e != nil {
		l.Grid = 1 / e.scale
		l.EncoderGrid = math.Ldexp(1, -e.encBits)
	}
	return l
}
