package train

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// claims are every statement a private run records: the plan's and the
// ledger's assumptions.
func claims(p *Plan) []string {
	return append(append([]string(nil), p.Assumptions...), p.Ledger.Assumptions...)
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
	cfg.Steps, cfg.NoiseMultiplier = 5, 1
	cfg.InsecureSeed = false
	if _, err := New(ctx, cfg); !errors.Is(err, ErrRefused) {
		t.Fatalf(`seed "test seed" without InsecureSeed: want a refusal, got %v`, err)
	} else {
		t.Logf("refused: %v", err)
	}

	cfg.InsecureSeed = true
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
	cfg.Seed, cfg.InsecureSeed = strong, false
	if tr, err = New(ctx, cfg); err != nil {
		t.Fatalf("32 random bytes refused: %v", err)
	}
	if p := tr.Plan(); !anyContains(p.Ledger.Assumptions, "reproducible from the seed") || anyContains(claims(p), "INSECURE") {
		t.Fatalf("strong seeded run: ledger %q", p.Ledger.Assumptions)
	}

	cfg.Seed = nil
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
		sampling Sampling
	}{
		{"dpsgd", SamplingPoisson},
		{"bandmf:4", SamplingBandPoisson},
		{"tree-online", SamplingFixedOrder},
		{"dpsgd", SamplingShuffle},
	} {
		cfg := baseConfig(t)
		cfg.Mechanism, cfg.Sampling, cfg.Steps, cfg.NoiseMultiplier = tc.mech, tc.sampling, 8, 1
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
