package train

import (
	"context"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/data"
)

// userAuditConfig is auditConfig at user level: 400 examples dealt to 100
// users with skewed counts, up to 3 examples a user a step, 120 users a
// step.
func userAuditConfig(t *testing.T, mech string, eps float64, seed int, cache string) Config {
	cfg := auditConfig(t, mech, eps, seed, cache)
	cfg.Data.Train = blobs(t, 400, 1)
	owners, err := data.DealOwners(cfg.Data.Train.Len(), 100, 1, uint64(seed)+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Data.Train.SetOwners(owners); err != nil {
		t.Fatal(err)
	}
	cfg.Privacy.UserBound = &privacy.UserBound{Examples: 3}
	return cfg
}

// The white-box audit at user level: 1000 canary users of 3 examples each
// join the 100 real users and are sampled as users; a sampled IN canary
// user contributes its whole clipped bound. The lower bound of a correct
// run never exceeds the claim (per user), and a run with the noise scaled
// by 0.25 that claims the same epsilon is caught, for DP-SGD (Poisson over
// users, amplified) and a correlated mechanism (BLT, fixed-order over
// users, unamplified).
func TestUserLevelWhiteboxAudit(t *testing.T) {
	ctx := context.Background()
	for _, mech := range []string{"dpsgd", "blt:2"} {
		t.Run(mech, func(t *testing.T) {
			const eps = 2
			seeds := 2
			if testing.Short() {
				seeds = 1
			}
			for seed := range seeds {
				res, err := Audit(ctx, userAuditConfig(t, mech, eps, seed, ""), AuditOptions{Canaries: 1000, Mode: AuditWhitebox})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("seed %d: %s sampling, claimed %.3f per user, lower bound %.3f (%+v)", seed, res.Plan.Sampling, res.Epsilon, res.EpsilonLowerBound, res.Bound.Guesses)
				if res.Unit != "user" || res.CanaryExamples != 3 || res.Plan.Ledger.Params["users"] != 1100 {
					t.Fatalf("unit %q, %d examples a canary, sampler over %v: want user, 3, 1100 users", res.Unit, res.CanaryExamples, res.Plan.Ledger.Params["users"])
				}
				if res.EpsilonLowerBound > res.Epsilon || res.GDPViolated {
					t.Errorf("seed %d: lower bound %.3f exceeds the claimed epsilon %.3f of a correct user-level run", seed, res.EpsilonLowerBound, res.Epsilon)
				}
			}
			res, err := Audit(ctx, userAuditConfig(t, mech, eps, 9, ""), AuditOptions{Canaries: 1000, Mode: AuditWhitebox, UnsafeNoiseScale: 0.25})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("noise x0.25: claimed %.3f, lower bound %.3f (%+v)", res.Epsilon, res.EpsilonLowerBound, res.Bound.Guesses)
			if !res.Violated {
				t.Errorf("noise scaled by 0.25: lower bound %.3f does not exceed the claimed %.3f", res.EpsilonLowerBound, res.Epsilon)
			}
		})
	}
}

// The black-box audit at user level: canary users of 3 mislabelled
// held-out examples each, scored by their mean loss; a correct run stays
// below its claim.
func TestUserLevelBlackboxAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: one full training run (recorded in BENCHMARKS.md)")
	}
	cfg := userAuditConfig(t, "dpsgd", 4, 0, "")
	cfg.Data.Test = blobs(t, 700, 2)
	res, err := Audit(context.Background(), cfg, AuditOptions{Canaries: 200, Mode: AuditBlackbox})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed %.3f per user, lower bound %.3f (%+v), %d IN", res.Epsilon, res.EpsilonLowerBound, res.Bound.Guesses, res.Bound.Included)
	if res.EpsilonLowerBound > res.Epsilon || res.Violated {
		t.Errorf("black-box lower bound %.3f exceeds the claim %.3f", res.EpsilonLowerBound, res.Epsilon)
	}
	if res.Bound.Included == 0 || res.Bound.Included == 200 || res.Final.Accuracy < 0.5 {
		t.Errorf("implausible audit: %d IN, final %+v", res.Bound.Included, res.Final)
	}
}
