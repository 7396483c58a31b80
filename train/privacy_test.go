package train

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

// claims are every statement a private run records.
func claims(p *privacy.Plan) []string {
	return p.Assumptions()
}

func anyContains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A seed guessable by anyone ("test seed") is refused for a private run
// unless the caller asks for an insecure experiment by name; a seeded run
// never claims a cryptographically strong generator, and says the noise is
// reproducible from the seed.
func TestSeededNoiseIsStatedAndWeakSeedsRefused(t *testing.T) {
	ctx := context.Background()
	cfg := baseConfig(t)
	cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier = 5, 1
	cfg.Privacy.InsecureSeed = false
	if _, err := New(ctx, cfg); !errors.Is(err, privacy.ErrRefused) {
		t.Fatalf(`seed "test seed" without InsecureSeed: want a refusal, got %v`, err)
	} else {
		t.Logf("refused: %v", err)
	}

	cfg.Privacy.InsecureSeed = true
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Plan()
	if !p.Seeded || !anyContains(p.Ledger.Assumptions, "reproducible from the seed") || !anyContains(p.Ledger.Assumptions, "INSECURE") {
		t.Fatalf("insecure seeded run: seeded = %v, ledger %q", p.Seeded, p.Ledger.Assumptions)
	}
	if anyContains(claims(p), "cryptographically strong") || anyContains(claims(p), "crypto/rand") {
		t.Fatalf("seeded run claims a CSPRNG: %q", claims(p))
	}

	strong, _ := hex.DecodeString("7cfcadc056e17ba31878145b515a63f1096e22b94f2128226545edf15b466cf2")
	cfg.Privacy.Seed, cfg.Privacy.InsecureSeed = strong, false
	if tr, err = New(ctx, cfg); err != nil {
		t.Fatalf("32 random bytes refused: %v", err)
	}
	if p := tr.Plan(); !anyContains(p.Ledger.Assumptions, "reproducible from the seed") || anyContains(claims(p), "INSECURE") {
		t.Fatalf("strong seeded run: ledger %q", p.Ledger.Assumptions)
	}

	cfg.Privacy.Seed = nil
	if tr, err = New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if p := tr.Plan(); p.Seeded || !anyContains(p.Ledger.Assumptions, "crypto/rand") || anyContains(claims(p), "reproducible from the seed") {
		t.Fatalf("unseeded run: seeded = %v, ledger %q", p.Seeded, p.Ledger.Assumptions)
	}
}

// Every run states one adjacency, once, and the right one: zero-out, under
// which the sensitivity of fixed-order and shuffled batches is computed and
// which Poisson sampling's accounting covers. Add/remove is never claimed:
// it is false for fixed-order and shuffled batching.
func TestOneAdjacencyStatedOnce(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		mech     string
		sampling privacy.Sampling
	}{
		{"dpsgd", privacy.SamplingPoisson},
		{"bandmf:4", privacy.SamplingBandPoisson},
		{"tree-online", privacy.SamplingFixedOrder},
		{"dpsgd", privacy.SamplingShuffle},
	} {
		cfg := baseConfig(t)
		cfg.Privacy.Mechanism, cfg.Privacy.Sampling, cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier = parseMech(t, tc.mech), tc.sampling, 8, 1
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(tr.Plan())
		if err != nil {
			t.Fatal(err)
		}
		js := strings.ToLower(string(b) + tr.Plan().String())
		if n := strings.Count(string(b), "adjacen"); n != 1 || !strings.Contains(string(b), `"adjacency":"zero-out"`) {
			t.Errorf("%s with %s: %d adjacency statements in the plan's JSON, want one, zero-out: %s", tc.mech, tc.sampling, n, b)
		}
		for _, bad := range []string{"add/remove", "add-remove", "add or remove"} {
			if strings.Contains(js, bad) {
				t.Errorf("%s with %s: the record claims %q adjacency", tc.mech, tc.sampling, bad)
			}
		}
	}
}

// Every step line reports the epsilon spent after that step: positive from
// the first step, before any evaluation, never stale after one, never below
// the exact value (Plan.EpsilonAfter) and at most 6% above it, and exactly
// the planned epsilon at the last step. RDP keeps the 120 exact reference
// values cheap; the grid logic is the accountant's-independent part.
func TestStepEpsilonIsSpentAfterThatStep(t *testing.T) {
	ctx := context.Background()
	for _, mech := range []string{"dpsgd", "bandmf:4", "tree-online"} {
		cfg := baseConfig(t)
		cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier, cfg.Privacy.Accountant = parseMech(t, mech), 40, 1, "rdp"
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := tr.Plan()
		prev := 0.0
		for i := 1; i <= cfg.Privacy.Steps; i++ {
			sm, err := tr.TrainStep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i == 5 {
				if _, err := tr.Evaluate(); err != nil {
					t.Fatal(err)
				}
			}
			exact, err := p.EpsilonAfter(i)
			if err != nil {
				t.Fatal(err)
			}
			if !(sm.Epsilon >= exact && sm.Epsilon <= 1.06*exact && sm.Epsilon >= prev) {
				t.Fatalf("%s step %d: reported epsilon %.6g, exact %.6g, previous step %.6g", mech, i, sm.Epsilon, exact, prev)
			}
			prev = sm.Epsilon
		}
		if prev != p.Epsilon {
			t.Fatalf("%s: last step reports epsilon %.8g, plan %.8g", mech, prev, p.Epsilon)
		}
	}
}

// Outputs computed from private data without noise are marked as outside
// the guarantee, in every step line, in the ledger, and, for an evaluation
// on the training set, under train_* keys instead of test_*.
func TestNonPrivateOutputsAreMarked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := baseConfig(t)
	cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier, cfg.Data.Test = 3, 1, nil
	cfg.Output.MetricsPath = filepath.Join(dir, "m.jsonl")
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.Output.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	var steps, evals int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		np := fmt.Sprint(m["not_private"])
		switch m["kind"] {
		case "step":
			steps++
			for _, k := range []string{"loss", "batch_size", "clipped_frac", "norm_quantiles", "non_finite"} {
				if !strings.Contains(np, k) {
					t.Fatalf("step line does not mark %q as not private: %s", k, line)
				}
			}
		case "eval":
			evals++
			if _, ok := m["test_accuracy"]; ok || m["split"] != "train" || !strings.Contains(np, "train_accuracy") {
				t.Fatalf("training-set evaluation reported as a test result: %s", line)
			}
		}
	}
	if steps != 3 || evals == 0 {
		t.Fatalf("%d step and %d eval lines", steps, evals)
	}
	if !anyContains(res.Plan.Ledger.Assumptions, "not covered by the guarantee") || !anyContains(res.Plan.Ledger.Assumptions, "training set") {
		t.Fatalf("ledger does not name the outputs outside the guarantee: %q", res.Plan.Ledger.Assumptions)
	}
}
