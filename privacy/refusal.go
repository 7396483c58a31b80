package privacy

import (
	"errors"
	"fmt"
)

// ErrRefused is matched (errors.Is) by every refusal of the planner: a
// combination of sampler, mechanism, accounting, participation or seed
// whose guarantee does not hold. The refusal itself is a *Refusal, which
// says which rule refused it.
var ErrRefused = errors.New("plan refused")

// ErrIncompatible is matched by every refusal of CheckCompatible (Rule
// RuleCompatible).
var ErrIncompatible = errors.New("incompatible sampler and mechanism")

// ErrWeakSeed is matched, with ErrRefused, when a private run is given a
// seed of fewer than MinSeedBits bits without asking for an insecure
// experiment (Rule RuleSeed).
var ErrWeakSeed = errors.New("seed too weak for a private run")

// Rule names the planner's rule that refused a plan, for callers that
// branch on it (errors.As with a *Refusal).
type Rule string

const (
	// RuleCompatible: the sampler does not realize the accounting or the
	// participation the mechanism's sensitivity is for (CheckCompatible).
	RuleCompatible Rule = "compatible"
	// RuleAmplification: amplification by sampling is claimed for an
	// encoder that has no amplified accounting.
	RuleAmplification Rule = "amplification"
	// RuleSampling: the mechanism was optimized for a participation that
	// the sampling does not realize.
	RuleSampling Rule = "sampling"
	// RuleBands: the band count, chosen or given, admits no amplified
	// accounting (bandmf:auto's choice, account's -bands).
	RuleBands Rule = "bands"
	// RuleSensitivity: the sensitivity under the schema cannot be
	// computed, or is not a positive number.
	RuleSensitivity Rule = "sensitivity"
	// RuleUnit: the unit of privacy is claimed without the bounding it
	// needs.
	RuleUnit Rule = "unit"
	// RuleSeed: a guessable seed for a private run (also ErrWeakSeed).
	RuleSeed Rule = "seed"
	// RuleHorizon: a release past the horizon the budget covers.
	RuleHorizon Rule = "horizon"
	// RuleBudget: no noise multiplier meets the target (epsilon, delta)
	// (the accountant's ErrInfeasible).
	RuleBudget Rule = "budget"
)

// Refusal is the error of a refused plan: the Rule that refused it and
// the Reason, a sentence naming what was asked. It matches ErrRefused and
// the rule's own sentinel (ErrIncompatible, ErrWeakSeed), not
// dpcore.ErrInvalid: the arguments are each valid, but the guarantee
// asked for does not hold. Callers branch on it with errors.As (command
// lines exit with status 2: the user can change what was asked).
type Refusal struct {
	Rule   Rule
	Reason string
	// Err is the cause, if any (for errors.Is); Reason already says it.
	Err error
}

// Error is "privacy: plan refused: REASON", with the rule's sentinel
// before the reason where it has one.
func (r *Refusal) Error() string {
	if s := r.Rule.sentinel(); s != nil {
		return fmt.Sprintf("privacy: %v: %v: %s", ErrRefused, s, r.Reason)
	}
	return fmt.Sprintf("privacy: %v: %s", ErrRefused, r.Reason)
}

// Is reports whether target is ErrRefused or the rule's sentinel.
func (r *Refusal) Is(target error) bool {
	return target == ErrRefused || (target != nil && target == r.Rule.sentinel())
}

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.Err }

func (r Rule) sentinel() error {
	switch r {
	case RuleCompatible:
		return ErrIncompatible
	case RuleSeed:
		return ErrWeakSeed
	}
	return nil
}

// refuse returns the *Refusal of rule with the formatted reason.
func refuse(rule Rule, format string, args ...any) error {
	return &Refusal{Rule: rule, Reason: fmt.Sprintf(format, args...)}
}
