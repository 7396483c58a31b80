package privacy

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// A caller's own factorization plugs in as a Mechanism: its declared bands
// are verified before the planner relies on them for amplification.
func TestOwnFactorizationPlugsIn(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 1000, 100, 16
	w, _ := dpcore.PrefixSum(n)
	id, err := mfnoise.DenseDPSGD(w)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Examples: m, Batch: batch, Steps: n, ClipNorm: 1, NoiseMultiplier: 1, Sampling: SamplingPoisson}
	req.Mechanism = CustomFactorization{Name: "mine", F: id, Bands: 1}
	p, _, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ref := req
	ref.Mechanism = mfnoise.DPSGD{}
	q, _, err := NewPlan(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Amplified || p.Epsilon != q.Epsilon || p.Mechanism != "mine" {
		t.Fatalf("own identity factorization: amplified %v, epsilon %v; dpsgd %v", p.Amplified, p.Epsilon, q.Epsilon)
	}

	tree, err := mfnoise.BinaryTree(w, mfnoise.TreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req.Mechanism = CustomFactorization{Name: "tall", F: tree, Bands: 1}
	if _, _, err := NewPlan(ctx, req); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("a tall encoder declared 1-banded: want dpcore.ErrInvalid, got %v", err)
	}
	req.Mechanism = CustomFactorization{Name: "tall", F: tree}
	if _, _, err := NewPlan(ctx, req); !errors.Is(err, ErrRefused) {
		t.Fatalf("a dense encoder with Poisson sampling: want a refusal, got %v", err)
	}
	req.Sampling = SamplingFixedOrder
	if p, _, err = NewPlan(ctx, req); err != nil || p.Amplified {
		t.Fatalf("dense encoder, fixed order: amplified %v, %v", p != nil && p.Amplified, err)
	}
}

// Epsilon and calibration agree: the plan calibrated to the epsilon of a
// given sigma finds that sigma back, for each accounting.
func TestCalibrationInvertsEpsilon(t *testing.T) {
	ctx := context.Background()
	for _, mech := range []Mechanism{mfnoise.DPSGD{}, mfnoise.BandMF{Bands: 2}, mfnoise.Tree{}} {
		req := Request{Mechanism: mech, Examples: 1000, Batch: 100, Steps: 16, ClipNorm: 1, NoiseMultiplier: 1.3, Accountant: RDP}
		p, _, err := NewPlan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		req.NoiseMultiplier, req.Epsilon = 0, p.Epsilon
		c, _, err := NewPlan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Calibrated || math.Abs(c.NoiseMultiplier-1.3) > 1e-3 || c.Epsilon > p.Epsilon*(1+1e-9) {
			t.Errorf("%v: sigma 1.3 gives epsilon %v; calibrated back: sigma %v, epsilon %v", mech, p.Epsilon, c.NoiseMultiplier, c.Epsilon)
		}
	}
}

func TestParseMechanismRoundTrip(t *testing.T) {
	for _, name := range []string{"dpsgd", "tree-online", "tree-full", "fft", "fft-opt", "mf-single", "mf-kb", "bandmf:8", "bandmf:auto", "toeplitz:8", "toeplitz:auto", "tree-online/s4", "bandmf:4/s2"} {
		m, err := ParseMechanism(name)
		if err != nil {
			t.Fatal(err)
		}
		if m.String() != name {
			t.Errorf("%q parses to %v", name, m)
		}
	}
	for _, bad := range []string{"laplace", "bandmf", "bandmf:0", "dpsgd:3", "bandmf:auto/s2", "toeplitz:auto/s2", "toeplitz:0", "toeplitz:autos", ""} {
		if _, err := ParseMechanism(bad); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%q: err = %v, want dpcore.ErrInvalid", bad, err)
		}
	}
}

// bandmf:auto picks its band count by amplified accounting among the
// counts that can amplify (b < m/B) and plans the chosen one; under band
// sampling it needs a target epsilon, and Poisson sampling is refused.
func TestAutoBandsChooseAndRefuse(t *testing.T) {
	ctx := context.Background()
	req := Request{Mechanism: mfnoise.BandMF{Auto: true}, Examples: 1000, Batch: 100, Steps: 16, ClipNorm: 1, Epsilon: 4, Accountant: RDP, Sampling: SamplingBandPoisson}
	p, s, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	chosen := p.BandTable.Chosen().Bands
	want := "dpsgd"
	if chosen > 1 {
		want = mfnoise.BandMF{Bands: chosen}.String()
	}
	if p.Mechanism != want || !p.Amplified || s.Accounting().Bands != max(chosen, 1) || len(p.BandTable.Table) != 4 {
		t.Fatalf("chose %d bands: plan %s, amplified %v, %d partitions, %d candidates", chosen, p.Mechanism, p.Amplified, s.Accounting().Bands, len(p.BandTable.Table))
	}
	bad := req
	bad.Sampling = SamplingPoisson
	if _, _, err := NewPlan(ctx, bad); !errors.Is(err, ErrRefused) {
		t.Errorf("bandmf:auto with poisson sampling: %v", err)
	}
	bad = req
	bad.Epsilon, bad.NoiseMultiplier = 0, 1
	if _, _, err := NewPlan(ctx, bad); !errors.Is(err, ErrRefused) {
		t.Errorf("bandmf:auto without a target epsilon: %v", err)
	}
}
