package privacy

import "fmt"

// Unit is the unit of privacy: what one neighbouring dataset differs by.
type Unit string

const (
	// UnitExample protects one example (row): the default.
	UnitExample Unit = "example"
	// UnitUser protects one user: all the examples one owner id holds.
	// The sampler draws users (Request.Examples counts users) and each
	// sampled user's contribution is bounded as a whole (UserBound).
	UnitUser Unit = "user"
)

// UserBound is how a user-level run bounds one user's contribution to a
// step's clipped sum, without which a user-level claim is refused.
type UserBound struct {
	// Examples is k, the most examples of one user that enter a step
	// (chosen with secret randomness when the user has more).
	Examples int `json:"examples_per_step"`
	// Mean says the user's gradient is the mean of its per-example
	// gradients, not their sum, before clipping.
	Mean bool `json:"mean"`
}

// unitAssumptions checks the unit against the bounding and returns what the
// claim says about it. owners > 0 is the largest number of examples one
// owner holds in an example-level run over owned data, whose per-user
// meaning is group privacy.
func (r *Request) unitAssumptions() ([]string, error) {
	switch r.Unit {
	case "", UnitExample:
		if r.UserBound != nil {
			return nil, invalidf("a per-user bound was given for an example-level plan: set Unit to %q", UnitUser)
		}
		if r.MaxOwnerExamples > 1 {
			return []string{fmt.Sprintf("unit of privacy: one example; the data has owners holding up to %d examples, for whom the guarantee is only group privacy over that many examples (epsilon times %d, delta amplified accordingly); train at user level to protect them", r.MaxOwnerExamples, r.MaxOwnerExamples)}, nil
		}
		return nil, nil
	case UnitUser:
		b := r.UserBound
		if b == nil || b.Examples < 1 {
			return nil, refuse(RuleUnit, "a user-level claim needs per-user contribution bounding (at most k >= 1 examples per user per step, the user's gradient clipped as a whole): none given")
		}
		how := "sum"
		if b.Mean {
			how = "mean"
		}
		return []string{
			fmt.Sprintf("unit of privacy: one user (all examples of one owner id); adjacency zero-out over users: all of one user's examples replaced by zero contribution at every step; the sampler draws users: the m = %d \"examples\" of the sampling statements are users", r.Examples),
			fmt.Sprintf("per-user bounding: at most %d examples of a sampled user enter a step (chosen with the run's secret randomness when it has more); the %s of their gradients is clipped to zeta as a whole, so one user moves a step's clipped sum by at most zeta", b.Examples, how),
		}, nil
	}
	return nil, invalidf("unit %q: want %q or %q", string(r.Unit), UnitExample, UnitUser)
}
