package train

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
)

// auditConfig is a small run whose model has room for 1000 canary
// coordinates: an MLP on the 1x4x4 blobs (2692 parameters).
func auditConfig(t testing.TB, mech string, eps float64, seed int, cache string) Config {
	m, err := privacy.ParseMechanism(mech)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Data:      Data{Train: blobs(t, 200, 1), Test: blobs(t, 100, 2)},
		Model:     ModelSpec{Name: "mlp", Hidden: []int{128}},
		Privacy:   privacy.Request{Steps: 100, Batch: 120, Mechanism: m, Epsilon: eps, ClipNorm: 1, Seed: []byte(fmt.Sprintf("audit seed %d", seed)), InsecureSeed: true, CacheDir: cache},
		Optimizer: Optimizer{LearningRate: 0.1},
		Output:    Output{EvalEvery: 1000},
	}
}

// The white-box audit, on dpsgd (Poisson, amplified), a binary tree
// (fixed-order, unamplified) and bandmf (band-poisson, amplified): over
// seeded runs the lower bound never exceeds the claim, and with the noise
// scaled by 0.25 (a broken system that still claims the same epsilon) it
// does.
func TestWhiteboxAuditBoundsTheClaimAndCatchesScaledNoise(t *testing.T) {
	ctx := context.Background()
	for _, mech := range []string{"dpsgd", "tree-online", "bandmf:4"} {
		t.Run(mech, func(t *testing.T) {
			const eps = 2
			cache := t.TempDir() // bandmf:4 is optimized once
			for seed := range 2 {
				res, err := Audit(ctx, auditConfig(t, mech, eps, seed, cache), AuditOptions{Canaries: 1000, Mode: AuditWhitebox})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("seed %d: claimed %.3f, lower bound %.3f (%+v)", seed, res.Epsilon, res.EpsilonLowerBound, res.Bound.Guesses)
				if res.EpsilonLowerBound > res.Epsilon {
					t.Errorf("seed %d: lower bound %.3f exceeds the claimed epsilon %.3f of a correct run", seed, res.EpsilonLowerBound, res.Epsilon)
				}
				if (res.GDP != nil) != !res.Plan.Amplified || res.GDPViolated {
					t.Errorf("seed %d: f-DP reading %+v (claimed mu %.3f) for an amplified=%v plan", seed, res.GDP, res.MuClaimed, res.Plan.Amplified)
				}
			}
			res, err := Audit(ctx, auditConfig(t, mech, eps, 9, cache), AuditOptions{Canaries: 1000, Mode: AuditWhitebox, UnsafeNoiseScale: 0.25})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("noise x0.25: claimed %.3f, lower bound %.3f (%+v)", res.Epsilon, res.EpsilonLowerBound, res.Bound.Guesses)
			if !res.Violated || res.EpsilonLowerBound <= res.Epsilon {
				t.Errorf("noise scaled by 0.25: lower bound %.3f does not exceed the claimed %.3f", res.EpsilonLowerBound, res.Epsilon)
			}
			if res.GDP != nil && !res.GDPViolated {
				t.Errorf("noise scaled by 0.25: mu lower bound %.3f does not exceed the claimed mu %.3f", res.GDP.MuLowerBound, res.MuClaimed)
			}
			if res.GDP != nil {
				t.Logf("f-DP: mu >= %.3f (claimed %.3f), epsilon >= %.3f", res.GDP.MuLowerBound, res.MuClaimed, res.GDP.EpsilonLowerBound)
			}
		})
	}
}

func TestAuditRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		cfg  func(*Config)
		opt  AuditOptions
	}{
		{"one canary", nil, AuditOptions{Canaries: 1, Mode: AuditWhitebox}},
		{"no mode", nil, AuditOptions{Canaries: 10}},
		{"negative scale", nil, AuditOptions{Canaries: 10, Mode: AuditWhitebox, UnsafeNoiseScale: -1}},
		{"confidence 1", nil, AuditOptions{Canaries: 10, Mode: AuditWhitebox, Confidence: 1}},
		{"non-private", func(c *Config) { c.NonPrivate = true }, AuditOptions{Canaries: 10, Mode: AuditWhitebox}},
		{"checkpoint", func(c *Config) { c.Output.CheckpointPath = "x" }, AuditOptions{Canaries: 10, Mode: AuditWhitebox}},
		{"too many canaries for the model", nil, AuditOptions{Canaries: 5000, Mode: AuditWhitebox}},
		{"too many blackbox canaries for the test set", nil, AuditOptions{Canaries: 100, Mode: AuditBlackbox}},
	}
	for _, c := range cases {
		cfg := auditConfig(t, "dpsgd", 2, 0, "")
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		_, err := Audit(ctx, cfg, c.opt)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: %v does not wrap dpcore.ErrInvalid", c.name, err)
		}
	}
}

// The black-box audit (mislabelled held-out canaries, final model only) of
// a correct run stays below the claim, and the canaries leave the test set.
func TestBlackboxAuditBoundsTheClaim(t *testing.T) {
	cfg := auditConfig(t, "dpsgd", 4, 0, "")
	cfg.Data.Test = blobs(t, 400, 2)
	res, err := Audit(context.Background(), cfg, AuditOptions{Canaries: 200, Mode: AuditBlackbox})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed %.3f, lower bound %.3f (%+v), %d IN", res.Epsilon, res.EpsilonLowerBound, res.Bound.Guesses, res.Bound.Included)
	if res.EpsilonLowerBound > res.Epsilon || res.Violated {
		t.Errorf("black-box lower bound %.3f exceeds the claim %.3f", res.EpsilonLowerBound, res.Epsilon)
	}
	if res.Bound.Included == 0 || res.Bound.Included == 200 || res.Plan == nil || res.Final.Accuracy < 0.5 {
		t.Errorf("implausible audit: %d IN, final %+v", res.Bound.Included, res.Final)
	}
}
