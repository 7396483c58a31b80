package privacy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// The unit of privacy is part of the claim: a user-level plan counts users,
// states the per-user bound in its assumptions, ledger and parameters, and
// accounts exactly like an example-level plan over that many units; a
// user-level plan without per-user bounding is refused, and an
// example-level plan over owned data says what it means per owner.
func TestUnitOfPrivacy(t *testing.T) {
	ctx := context.Background()
	base := Request{Mechanism: mfnoise.DPSGD{}, Examples: 500, Batch: 50, Steps: 20, ClipNorm: 1, NoiseMultiplier: 1}
	ex, _, err := NewPlan(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Unit != UnitExample || ex.UserBound != nil || ex.Ledger.Unit != "example" || !strings.Contains(ex.String(), "per example under zero-out") {
		t.Fatalf("example-level plan: unit %q, bound %v, ledger unit %q\n%s", ex.Unit, ex.UserBound, ex.Ledger.Unit, ex)
	}
	ur := base
	ur.Unit, ur.UserBound = UnitUser, &UserBound{Examples: 3}
	u, s, err := NewPlan(ctx, ur)
	if err != nil {
		t.Fatal(err)
	}
	if s.Examples() != 500 || u.Unit != UnitUser || u.Ledger.Unit != "user" || u.Ledger.Adjacency != accountant.ZeroOut ||
		u.Ledger.Params["users"] != 500 || u.Ledger.Params["examples_per_user_per_step"] != 3 || u.Epsilon != ex.Epsilon {
		t.Fatalf("user-level plan: sampler over %d, unit %q, ledger %+v, epsilon %v (example level %v)", s.Examples(), u.Unit, u.Ledger, u.Epsilon, ex.Epsilon)
	}
	if !strings.Contains(strings.Join(u.Assumptions(), "\n"), "at most 3 examples of a sampled user") || !strings.Contains(u.String(), "per user under zero-out") {
		t.Fatalf("user-level plan does not state its bound:\n%s", u)
	}
	for _, b := range []*UserBound{nil, {Examples: 0}} {
		bad := ur
		bad.UserBound = b
		if _, _, err := NewPlan(ctx, bad); !errors.Is(err, ErrRefused) {
			t.Errorf("user level with bound %v: %v, want a refusal", b, err)
		}
	}
	bad := base
	bad.UserBound = &UserBound{Examples: 2}
	if _, _, err := NewPlan(ctx, bad); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("example level with a user bound: %v, want dpcore.ErrInvalid", err)
	}
	bad = base
	bad.Unit = "person"
	if _, _, err := NewPlan(ctx, bad); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unit %q: %v, want dpcore.ErrInvalid", bad.Unit, err)
	}
	owned := base
	owned.MaxOwnerExamples = 40
	o, _, err := NewPlan(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(o.Assumptions(), "\n"), "group privacy over that many examples") {
		t.Fatalf("example-level plan over owned data does not say what it means per owner:\n%s", o)
	}
}
