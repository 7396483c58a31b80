package train

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/audit"
	"github.com/dpmf-go/dpmf/privacy"
)

// Black-box canaries are zero-out canaries: all of them are in the data
// set, so the plan (number of examples or users, sampling rate, delta,
// noise) is the same whichever canaries the draw puts IN, and an OUT
// canary is dropped from every batch. When only the IN canaries were
// added, m was train + #IN and the plan changed with the draw.
func TestBlackboxCanariesAreZeroOut(t *testing.T) {
	ctx := context.Background()
	const canaries = 20
	for _, userLevel := range []bool{false, true} {
		var plans []*privacy.Plan
		var included []int
		want := 200 + canaries
		for seed := range 2 {
			cfg := auditConfig(t, "dpsgd", 4, seed, "")
			cfg.Privacy.Steps, cfg.Data.Test = 5, blobs(t, 100, 2)
			key := "examples"
			if userLevel {
				cfg = userAuditConfig(t, "dpsgd", 4, seed, "")
				cfg.Privacy.Steps, cfg.Data.Test, cfg.Privacy.Batch = 5, blobs(t, 100, 2), 30
				key, want = "users", 100+canaries
			}
			res, err := Audit(ctx, cfg, AuditOptions{Canaries: canaries, Mode: AuditBlackbox})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Plan.Ledger.Params[key]; got != want {
				t.Errorf("user level %v, seed %d: the plan is over %v %s, want %d (every canary, IN or OUT)", userLevel, seed, got, key, want)
			}
			plans, included = append(plans, res.Plan), append(included, res.Bound.Included)
		}
		a, b := plans[0], plans[1]
		if included[0] == included[1] {
			t.Fatalf("user level %v: both draws put %d canaries IN; pick seeds that differ", userLevel, included[0])
		}
		if a.Accounting.Q != b.Accounting.Q || a.Delta != b.Delta || a.NoiseMultiplier != b.NoiseMultiplier || a.Epsilon != b.Epsilon {
			t.Errorf("user level %v: the plan depends on the draw (%d and %d IN): q %v/%v, delta %v/%v, sigma %v/%v",
				userLevel, included[0], included[1], a.Accounting.Q, b.Accounting.Q, a.Delta, b.Delta, a.NoiseMultiplier, b.NoiseMultiplier)
		}
	}
	// The hook drops exactly the OUT canaries from a batch.
	h := &auditHook{start: 10, out: []bool{true, false, true}}
	if got := h.batch([]int{1, 10, 11, 12, 3}); !slices.Equal(got, []int{1, 11, 3}) {
		t.Errorf("batch with canaries 0 (OUT), 1 (IN), 2 (OUT): kept %v, want [1 11 3]", got)
	}
}

// An audit reports one flag at the stated confidence. For an unamplified
// plan two readings test the claim (epsilon, and (1/sigma)-GDP); each is
// made at half the error probability, so that the flag holds at the
// confidence. Scores where the GDP reading rejects the claimed mu at level
// 0.05 but not at 0.025 must not be flagged at 95%; flagging them (each
// reading at 95%, as before) is a test at 90%.
func TestAuditOneFlagAtTheConfidence(t *testing.T) {
	const m, delta, conf = 2000, 1e-5, 0.95
	r := rand.New(rand.NewPCG(3, 4))
	scores, in := make([]float64, m), make([]bool, m)
	for i := range scores {
		in[i] = r.Uint64()&1 == 1
		scores[i] = r.NormFloat64()
		if in[i] {
			scores[i] += 2
		}
	}
	at := func(c float64) float64 {
		g, err := audit.GDPFromScores(scores, in, delta, c, audit.Bonferroni)
		if err != nil {
			t.Fatal(err)
		}
		return g.MuLowerBound
	}
	mu95, mu975 := at(conf), at(1-(1-conf)/2)
	if !(mu95 > mu975) {
		t.Fatalf("mu bound %v at 95%%, %v at 97.5%%", mu95, mu975)
	}
	for _, tc := range []struct {
		mu   float64
		want bool
	}{{(mu95 + mu975) / 2, false}, {mu975 * 0.99, true}} {
		sigma := 1 / tc.mu
		eps, err := privacy.GaussianEpsilon(sigma, delta)
		if err != nil {
			t.Fatal(err)
		}
		// The epsilon claim is generous, so only the GDP reading can flag.
		res := &AuditResult{Plan: &privacy.Plan{NoiseMultiplier: sigma, Delta: delta, Epsilon: 2 * eps}, Epsilon: 2 * eps, Confidence: conf}
		if err := res.bound(scores, in, AuditOptions{Confidence: conf, Search: audit.Bonferroni}); err != nil {
			t.Fatal(err)
		}
		flagged := res.Violated || res.GDPViolated
		t.Logf("claimed mu %.4f (mu >= %.4f at 95%%, %.4f at 97.5%%): flagged %v", tc.mu, mu95, mu975, flagged)
		if flagged != tc.want || res.Violated != res.GDPViolated {
			t.Errorf("claimed mu %.4f between the 97.5%% bound %.4f and the 95%% bound %.4f: violated %v, GDP reading %v, want one flag %v",
				tc.mu, mu975, mu95, res.Violated, res.GDPViolated, tc.want)
		}
		if res.GDP == nil || math.Abs(res.GDP.Confidence-0.975) > 1e-12 || math.Abs(res.Bound.Confidence-0.975) > 1e-12 {
			t.Errorf("each of the two readings should be at 97.5%%: %+v, %+v", res.GDP, res.Bound)
		}
	}
}
