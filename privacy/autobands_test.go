package privacy

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// bandmf:auto chooses its band count from banded Toeplitz proxies and
// optimizes only the finalists; its choice scores (sigma^2 * loss) within
// 1e-3 of the cold selection that optimizes every candidate as bandmf at
// full precision and ranks them by their own losses. Reached twice
// through one cache, the encoder is the same.
func TestAutoBandsProxySelectionMatchesCold(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 1000, 50, 64
	w, _ := dpcore.MomentumWorkload(n, 0.95, dpcore.CooldownSchedule(n, 0.25, 0.05))
	req := Request{Mechanism: mfnoise.BandMF{Auto: true}, Workload: w, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, Epsilon: 4, Accountant: RDP}
	req.Build.Cache = &mfnoise.Cache{Dir: t.TempDir()}
	p, _, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	single := dpcore.SingleParticipation()
	var cold []accountant.BandCandidate
	for b := 1; b < m/batch && b <= n; b *= 2 {
		r, err := mfnoise.OptimizeBanded(ctx, w, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		cold = append(cold, accountant.BandCandidate{Bands: b, Loss: r.Loss})
	}
	acct, _ := RDP.New()
	ref, err := accountant.SelectBands(acct, req.Epsilon, p.Delta, m, batch, n, cold)
	if err != nil {
		t.Fatal(err)
	}
	got := p.NoiseMultiplier * p.NoiseMultiplier * p.Loss
	t.Logf("proxy selection: %s, score %.8g; cold: %d bands, score %.8g", p.Mechanism, got, ref.Chosen().Bands, ref.Chosen().Score)
	for _, r := range p.BandTable.Table {
		t.Logf("  %d bands: loss %.8g (proxy %v), sigma %.5g, score %.8g", r.Bands, r.Loss, r.Proxy, r.Sigma, r.Score)
	}
	if got > ref.Chosen().Score*(1+1e-3) {
		t.Errorf("proxy-selected %s scores %.8g, cold selection %d bands %.8g", p.Mechanism, got, ref.Chosen().Bands, ref.Chosen().Score)
	}
	if c := p.BandTable.Chosen(); c.Proxy || math.Abs(c.Score-got) > 1e-9*got {
		t.Errorf("chosen row %+v: the plan scores %.10g", c, got)
	}
	f1, err := p.Factorization()
	if err != nil {
		t.Fatal(err)
	}
	sens, _ := sensitivity.Of(f1.Encoder, single)
	if math.Abs(sens.Value-1) > 1e-12 {
		t.Errorf("chosen encoder's column norm %v, want 1", sens.Value)
	}
	q, _, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	f2, _ := q.Factorization()
	if q.Mechanism != p.Mechanism || !mat.Equal(f1.Encoder, f2.Encoder) {
		t.Errorf("second plan through the cache: %s, same encoder %v", q.Mechanism, mat.Equal(f1.Encoder, f2.Encoder))
	}
}

// toeplitz:auto picks its band count by amplified accounting among the
// counts that amplify (b < m/B) and is then planned exactly as
// toeplitz:B: band sampling over B partitions, amplified accounting with
// the per-participation sensitivity, the same sigma and epsilon. Its
// table holds the banded Toeplitz losses themselves (no proxies). It needs
// band sampling and a target epsilon.
func TestToeplitzAutoAccountedAsBanded(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 1000, 50, 64
	w, _ := dpcore.MomentumWorkload(n, 0.95, dpcore.CooldownSchedule(n, 0.25, 0.05))
	auto, err := ParseMechanism("toeplitz:auto")
	if err != nil {
		t.Fatal(err)
	}
	if st := auto.Structure(); !st.AutoBands || samplingFor(st) != SamplingBandPoisson {
		t.Fatalf("toeplitz:auto structure %+v", st)
	}
	req := Request{Mechanism: auto, Workload: w, Examples: m, Batch: batch, Steps: n, ClipNorm: 1, Epsilon: 4, Accountant: RDP}
	p, s, err := NewPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	chosen := p.BandTable.Chosen()
	if chosen.Bands < 2 || chosen.Bands >= m/batch || len(p.BandTable.Table) != 5 {
		t.Fatalf("chose %d bands of %d candidates", chosen.Bands, len(p.BandTable.Table))
	}
	for i, r := range p.BandTable.Table {
		if r.Proxy || r.Score < chosen.Score {
			t.Errorf("row %d: %+v (chosen score %v)", i, r, chosen.Score)
		}
	}
	explicit, err := ParseMechanism("toeplitz:" + strconv.Itoa(chosen.Bands))
	if err != nil {
		t.Fatal(err)
	}
	ref := req
	ref.Mechanism = explicit
	q, qs, err := NewPlan(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mechanism != q.Mechanism || p.Sampling != SamplingBandPoisson || p.Sampling != q.Sampling || p.Schema != q.Schema ||
		!p.Amplified || !q.Amplified || s.Accounting().Bands != chosen.Bands || qs.Accounting().Bands != chosen.Bands ||
		p.Accounting.Q != q.Accounting.Q || p.Accounting.Compositions != q.Accounting.Compositions {
		t.Fatalf("toeplitz:auto planned %s %s %s amplified %v %+v; toeplitz:%d planned %s %s %s amplified %v %+v",
			p.Mechanism, p.Sampling, p.Schema, p.Amplified, s.Accounting(), chosen.Bands, q.Mechanism, q.Sampling, q.Schema, q.Amplified, qs.Accounting())
	}
	if p.NoiseMultiplier != q.NoiseMultiplier || p.Epsilon != q.Epsilon || p.Sensitivity != q.Sensitivity || p.Loss != q.Loss {
		t.Errorf("toeplitz:auto sigma %v eps %v sens %+v loss %v; toeplitz:%d sigma %v eps %v sens %+v loss %v",
			p.NoiseMultiplier, p.Epsilon, p.Sensitivity, p.Loss, chosen.Bands, q.NoiseMultiplier, q.Epsilon, q.Sensitivity, q.Loss)
	}
	if math.Abs(p.NoiseMultiplier-chosen.Sigma) > 1e-9 || p.Epsilon > req.Epsilon*(1+1e-9) {
		t.Errorf("sigma %v (table %v), epsilon %v for target %v", p.NoiseMultiplier, chosen.Sigma, p.Epsilon, req.Epsilon)
	}
	bad := req
	bad.Sampling = SamplingFixedOrder
	if _, _, err := NewPlan(ctx, bad); !errors.Is(err, ErrRefused) {
		t.Errorf("toeplitz:auto with fixed-order sampling: %v", err)
	}
	bad = req
	bad.Epsilon, bad.NoiseMultiplier = 0, 1
	if _, _, err := NewPlan(ctx, bad); !errors.Is(err, ErrRefused) {
		t.Errorf("toeplitz:auto without a target epsilon: %v", err)
	}
}
