package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/privacy"
)

// TestFashionMNISTUserLevelExperiment is the user-level experiment of
// BENCHMARKS.md (issue 29): real Fashion-MNIST with the synthetic owner
// assignment (data.DealOwners: 6000 users, skew 1, seed 1), the MLP,
// 300 steps of 250 expected users (user level) or examples (example
// level). Hyperparameters: the example-level benchmark's (SGD lr 0.5 for
// dpsgd; momentum 0.95, lr 0.1 for the correlated mechanisms; cooldown
// 25%, clip 1), fixed in advance. The per-user knobs (mechanism among
// toeplitz:16 and blt:4, k among 1 and 4) are chosen at epsilon 8 on a
// validation split by users (600 of the 6000 users held out of the
// training set), never on the test set; the choice is then run on the
// whole training set and measured on the test set at epsilon 3 and 8,
// next to example-level runs at the same epsilon. It takes tens of CPU
// minutes: run it with DPMF_USERLEVEL_EXPERIMENT=1.
func TestFashionMNISTUserLevelExperiment(t *testing.T) {
	if testing.Short() || os.Getenv("DPMF_USERLEVEL_EXPERIMENT") == "" {
		t.Skip("needs DPMF_USERLEVEL_EXPERIMENT=1 and no -short: a long experiment (results in BENCHMARKS.md)")
	}
	trainSet, testSet, err := data.LoadFashionMNIST(data.DefaultFashionMNISTDir)
	if err != nil {
		t.Skipf("needs Debian's dataset-fashion-mnist: %v", err)
	}
	owners, err := data.DealOwners(trainSet.Len(), 6000, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := trainSet.SetOwners(owners); err != nil {
		t.Fatal(err)
	}
	us, err := trainSet.Users()
	if err != nil {
		t.Fatal(err)
	}
	// Validation split by users: the last 600 users (first-appearance
	// order, random since the examples were dealt at random).
	var fit, val []int
	for k := range us.Len() {
		if k < 5400 {
			fit = append(fit, us.Of(k)...)
		} else {
			val = append(val, us.Of(k)...)
		}
	}
	fitSet, err := trainSet.Subset(fit)
	if err != nil {
		t.Fatal(err)
	}
	valSet, err := trainSet.Subset(val)
	if err != nil {
		t.Fatal(err)
	}
	seed := os.Getenv("DPMF_USERLEVEL_SEED")
	if seed == "" {
		seed = "userlevel-1"
	}
	run := func(tr, te *data.Dataset, mech string, eps float64, user bool, k int) (*Result, error) {
		cfg := Config{
			Data:      Data{Train: tr, Test: te},
			Model:     ModelSpec{Name: "mlp", Hidden: []int{128}},
			Privacy:   privacy.Request{Steps: 300, Batch: 250, Epsilon: eps, ClipNorm: 1, Mechanism: parseMech(t, mech), Seed: []byte(seed + mech), InsecureSeed: true},
			Optimizer: Optimizer{LearningRate: 0.5, CooldownFrac: 0.25},
			Output:    Output{EvalEvery: 300},
		}
		if mech != "dpsgd" {
			cfg.Optimizer.Momentum, cfg.Optimizer.LearningRate = 0.95, 0.1
		}
		if user {
			cfg.Privacy.UserBound = &privacy.UserBound{Examples: k}
		}
		return Run(context.Background(), cfg)
	}
	line := func(res *Result) string {
		p := res.Plan
		return fmt.Sprintf("%s %s unit=%s k=%v sigma=%.4f eps=%.3f acc=%.4f (%.0fs)", p.Mechanism, p.Sampling, p.Unit, p.UserBound, p.NoiseMultiplier, p.Epsilon, res.Final.Accuracy, res.Elapsed.Seconds())
	}
	// Selection on validation, at epsilon 8.
	type choice struct {
		mech string
		k    int
	}
	bestVal := map[string]float64{}
	best := map[string]choice{}
	cands := []choice{{"dpsgd", 1}, {"dpsgd", 4}, {"toeplitz:16", 1}, {"toeplitz:16", 4}, {"blt:4", 1}, {"blt:4", 4}}
	if os.Getenv("DPMF_USERLEVEL_CHOSEN") != "" {
		// Repeats with other seeds reuse the first seed's choice
		// (BENCHMARKS.md): dpsgd k=4, toeplitz:16 k=4.
		cands = nil
		best["dpsgd"], best["correlated"] = choice{"dpsgd", 4}, choice{"toeplitz:16", 4}
	}
	for _, c := range cands {
		res, err := run(fitSet, valSet, c.mech, 8, true, c.k)
		if err != nil {
			t.Logf("validation %s k=%d: %v", c.mech, c.k, err)
			continue
		}
		t.Logf("validation: %s", line(res))
		family := "correlated"
		if c.mech == "dpsgd" {
			family = "dpsgd"
		}
		if a := res.Final.Accuracy; a > bestVal[family] {
			bestVal[family], best[family] = a, c
		}
	}
	t.Logf("chosen on validation: dpsgd k=%d; correlated %s k=%d", best["dpsgd"].k, best["correlated"].mech, best["correlated"].k)
	// Test runs.
	acct, _ := privacy.PLD.New()
	for _, eps := range []float64{3, 8} {
		for _, fam := range []string{"dpsgd", "correlated"} {
			c := best[fam]
			res, err := run(trainSet, testSet, c.mech, eps, true, c.k)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("test, user level: %s", line(res))
			if res.Plan.Epsilon > eps {
				t.Errorf("epsilon %v above the target %v", res.Plan.Epsilon, eps)
			}
		}
		for _, mech := range []string{"dpsgd", "toeplitz:16"} {
			res, err := run(trainSet, testSet, mech, eps, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("test, example level: %s", line(res))
			if mech != "dpsgd" {
				continue
			}
			// What the example-level DP-SGD claim means for a user of g
			// examples: its examples join a step with probability
			// 1-(1-q)^g and move the sum by at most g*zeta, so the run is
			// a Poisson-subsampled Gaussian at that rate with noise
			// multiplier sigma/g (a sound upper bound; group privacy from
			// (eps, delta) has a larger delta); PLD accounting, g = 1 repeats the
			// claim.
			p := res.Plan
			var per []string
			for _, g := range []int{1, 2, 3, 7} {
				q := 1 - math.Pow(1-p.Accounting.Q, float64(g))
				e, err := privacy.Composition{Amplified: true, Q: q, Partitions: 1}.Epsilon(acct, p.NoiseMultiplier/float64(g), 300, p.Delta)
				if err != nil {
					per = append(per, fmt.Sprintf("g=%d: %v", g, err))
					continue
				}
				per = append(per, fmt.Sprintf("g=%d: %.3g", g, e))
			}
			t.Logf("example-level dpsgd at eps %.3g, per user of g examples: %s", p.Epsilon, strings.Join(per, ", "))
		}
	}
}
