package privacy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/sampler"
)

// TestRandomAllocationPlan: DP-SGD under random allocation plans the
// amplified accounting of its epochs (the accountant's event, exactly),
// states the assumptions and the accountant, claims less than the same
// noise unamplified under shuffling, and reports the epsilon spent per
// epoch; every other mechanism is refused before anything is built.
func TestRandomAllocationPlan(t *testing.T) {
	ctx := context.Background()
	const m, batch, n, sigma = 1000, 100, 35, 3.0 // t = 10: 4 epochs, the last partial
	req := Request{Mechanism: mfnoise.DPSGD{}, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, NoiseMultiplier: sigma,
		Sampling: SamplingRandomAllocation}
	p, s, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Amplified || p.Accounting.Kind != sampler.AccountingRandomAllocation || p.Accounting.AllocationSize != 10 || p.Accounting.Compositions != 4 {
		t.Fatalf("plan: amplified %v, accounting %+v", p.Amplified, p.Accounting)
	}
	if s.ExpectedBatch() != float64(m)/10 {
		t.Fatalf("expected batch %v", s.ExpectedBatch())
	}
	ev, err := accountant.DPSGDAllocationEvent(sigma, 10, n)
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.acct.Epsilon(ev, p.Delta)
	if err != nil || p.Epsilon != want {
		t.Fatalf("plan epsilon %v, accountant %v (%v)", p.Epsilon, want, err)
	}
	text := p.String()
	for _, w := range []string{"random-allocation sampling", "by pld accounting", accountant.AssumeAllocation, "random allocation of a Gaussian mechanism over t = 10 steps"} {
		if !strings.Contains(text, w) {
			t.Errorf("plan text lacks %q:\n%s", w, text)
		}
	}
	req.Sampling = SamplingShuffle
	sh, _, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !(p.Epsilon < sh.Epsilon) || sh.Amplified {
		t.Fatalf("random allocation %v, shuffle (unamplified %v) %v", p.Epsilon, !sh.Amplified, sh.Epsilon)
	}
	// Epsilon spent grows by epochs and ends at the plan's.
	e1, err := p.EpsilonSpent(1)
	if err != nil {
		t.Fatal(err)
	}
	e10, _ := p.EpsilonSpent(10)
	eEnd, _ := p.EpsilonSpent(n)
	if e1 != e10 || !(e10 < eEnd) || eEnd != p.Epsilon {
		t.Fatalf("spent after 1, 10, %d steps: %v, %v, %v (plan %v)", n, e1, e10, eEnd, p.Epsilon)
	}

	for _, name := range []string{"bandmf:4", "toeplitz:4", "mf-kb", "blt:2", "bandmf:auto"} {
		mech, err := ParseMechanism(name)
		if err != nil {
			t.Fatal(err)
		}
		r := req
		r.Mechanism, r.Sampling = mech, SamplingRandomAllocation
		var ref *Refusal
		if _, _, err := NewPlan(ctx, r); !errors.As(err, &ref) {
			t.Fatalf("%s with random allocation: err = %v, want a refusal", name, err)
		}
		if err := CheckRequest(r); !errors.As(err, &ref) {
			t.Fatalf("%s: CheckRequest: err = %v, want a refusal", name, err)
		}
	}
}

// TestCheckCompatibleRandomAllocation: the sampler's amplification holds
// for DP-SGD only.
func TestCheckCompatibleRandomAllocation(t *testing.T) {
	s, err := sampler.NewRandomAllocation(1000, 100, 30, sampler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckCompatible(s, s.Schema(), 1, true); err != nil {
		t.Fatalf("DP-SGD: %v", err)
	}
	for _, bands := range []int{0, 2, 10} {
		if err := CheckCompatible(s, s.Schema(), bands, true); !errors.Is(err, ErrIncompatible) {
			t.Fatalf("bands %d amplified: err = %v, want ErrIncompatible", bands, err)
		}
	}
	b, err := sampler.NewBandAllocation(1000, 50, 4, 40, sampler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for bands, ok := range map[int]bool{0: false, 1: true, 4: true, 5: false} {
		if err := CheckCompatible(b, b.Schema(), bands, true); (err == nil) != ok {
			t.Fatalf("band allocation, 4 partitions, %d bands: err = %v", bands, err)
		}
	}
	// Unamplified, its schema minsep(k, 1) is what shuffling realizes.
	if err := CheckCompatible(s, dpcore.Schema{Kind: dpcore.MinSep, K: 3, B: 1}, 0, false); err != nil {
		t.Fatalf("unamplified: %v", err)
	}
}

// TestBandAllocationPlan: a banded encoder under band allocation is
// accounted as random allocation over each partition's band epochs
// (docs/math.md, section 7.1), checked against its encoder's bands like
// band-Poisson; more bands than partitions, a dense encoder and an auto
// band count are refused.
func TestBandAllocationPlan(t *testing.T) {
	ctx := context.Background()
	const m, batch, n, sigma = 1000, 50, 40, 3.0 // partitions of 250, t = 5: 10 steps each, 2 band epochs
	mech, err := ParseMechanism("bandmf:4")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Mechanism: mech, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, NoiseMultiplier: sigma,
		Sampling: SamplingBandAllocation}
	p, _, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Amplified || p.Accounting.AllocationSize != 5 || p.Accounting.Compositions != 2 || p.Accounting.Bands != 4 {
		t.Fatalf("plan: amplified %v, accounting %+v", p.Amplified, p.Accounting)
	}
	ev, _ := accountant.DPSGDAllocationEvent(sigma, 5, 10)
	if want, err := p.acct.Epsilon(ev, p.Delta); err != nil || p.Epsilon != want {
		t.Fatalf("plan epsilon %v, accountant %v (%v)", p.Epsilon, want, err)
	}
	if e, _ := p.EpsilonSpent(20); !(e < p.Epsilon) {
		t.Fatalf("after one band epoch of every partition: %v, not below %v", e, p.Epsilon)
	}
	for _, c := range []struct {
		name       string
		partitions int
	}{{"bandmf:8", 4}, {"mf-kb", 0}, {"bandmf:auto", 0}, {"toeplitz:auto", 0}} {
		mech, err := ParseMechanism(c.name)
		if err != nil {
			t.Fatal(err)
		}
		r := req
		r.Mechanism, r.Partitions = mech, c.partitions
		var ref *Refusal
		if _, _, err := NewPlan(ctx, r); !errors.As(err, &ref) {
			t.Fatalf("%s with band allocation over %d partitions: err = %v, want a refusal", c.name, c.partitions, err)
		}
	}
}
