package audit

import (
	"context"
	"crypto/sha256"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/privacy"
	"gonum.org/v1/gonum/mat"
)

func buildMech(t *testing.T, name string, n int, schema dpcore.Schema) *mfnoise.Factorization {
	t.Helper()
	spec, err := privacy.ParseMechanism(name)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := dpcore.PrefixSum(n)
	f, err := mfnoise.BuildDense(context.Background(), spec, w, schema, mfnoise.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// For a tall encoder with the optimal decoder (tree-full: G = C^+) the
// precision computed from G G^T must be C^T C, the encoder's whitening.
func TestPrecisionOfOptimalDecoderIsEncoderGram(t *testing.T) {
	const n = 32
	f := buildMech(t, "tree-full", n, dpcore.SingleParticipation())
	p, err := precision(f, n)
	if err != nil {
		t.Fatal(err)
	}
	var want mat.Dense
	want.Mul(f.Encoder.T(), f.Encoder)
	var diff mat.Dense
	diff.Sub(p, &want)
	if d := mat.Norm(&diff, math.Inf(1)); d > 1e-8*mat.Norm(&want, math.Inf(1)) {
		t.Errorf("||P - C'C||_inf = %.3g", d)
	}
}

// treeAudit configures whiteboxTree.
type treeAudit struct {
	canaries   int
	noiseScale float64 // multiplies the calibrated noise
	noWhiten   bool    // score with the identity precision (the DP-SGD statistic)
	singleSens bool    // calibrate with the single-participation sensitivity (a bug)
}

// whiteboxTree audits a streamed matrix mechanism directly: (k,b) = (4,16)
// fixed-order participation over n = 64 steps, canary j in pattern j mod
// 16, noise from the real mfnoise source calibrated to eps = 2 with the
// (k,b) sensitivity (or, under singleSens, wrongly with the single
// participation one), times noiseScale.
func whiteboxTree(t *testing.T, mech string, a treeAudit) (claimed float64, res Result, gdp GDPResult) {
	t.Helper()
	const n, k, b, delta = 64, 4, 16, 1e-5
	m := a.canaries
	schema, _ := dpcore.KBParticipation(k, b)
	f := buildMech(t, mech, n, schema)
	calib := schema
	if a.singleSens {
		calib = dpcore.SingleParticipation()
	}
	sens, err := sensitivity.Of(f.Encoder, calib)
	if err != nil {
		t.Fatal(err)
	}
	claimed = 2
	sigma, err := privacy.GaussianSigma(claimed, delta)
	if err != nil {
		t.Fatal(err)
	}
	seed := sha256.Sum256([]byte("tree audit " + mech))
	cfg := WhiteboxConfig{Canaries: m, Dim: m, Steps: n, ClipNorm: 1, NoiseStd: sigma * sens.Value, Factorization: f, Seed: (*dpcore.Seed)(&seed)}
	if a.noWhiten {
		cfg.Factorization = nil
	}
	wb, err := NewWhitebox(cfg)
	if err != nil {
		t.Fatal(err)
	}
	noise, err := noise.New(f, m, noise.Options{Seed: (*dpcore.Seed)(&seed)})
	if err != nil {
		t.Fatal(err)
	}
	sum, z := make([]float32, m), make([]float32, m)
	for step := 1; step <= n; step++ {
		clear(sum)
		var joined []int
		for j := (step - 1) % b; j < m; j += b {
			joined = append(joined, j)
		}
		if err := wb.Add(step, joined, sum); err != nil {
			t.Fatal(err)
		}
		if err := noise.Next(z); err != nil {
			t.Fatal(err)
		}
		for i := range sum {
			sum[i] += float32(a.noiseScale*cfg.NoiseStd) * z[i]
		}
		if err := wb.Observe(step, sum, nil); err != nil {
			t.Fatal(err)
		}
	}
	scores, err := wb.Scores()
	if err != nil {
		t.Fatal(err)
	}
	if res, err = FromScores(scores, wb.Membership(), delta, 0.95, Bonferroni); err != nil {
		t.Fatal(err)
	}
	if gdp, err = GDPFromScores(scores, wb.Membership(), delta, 0.95, Bonferroni); err != nil {
		t.Fatal(err)
	}
	return claimed, res, gdp
}

// Whitening with the mechanism's noise correlation is what makes the audit
// of a correlated-noise mechanism tight: with the noise scaled by 0.25 the
// whitened audit exceeds the claim while the DP-SGD statistic (summing the
// canary's coordinate) stays below it; with the right noise neither does.
func TestWhiteningIsNeededForCorrelatedNoise(t *testing.T) {
	for _, mech := range []string{"tree-online", "tree-full", "mf-single"} {
		claimed, ok, _ := whiteboxTree(t, mech, treeAudit{canaries: 1000, noiseScale: 1})
		_, broken, _ := whiteboxTree(t, mech, treeAudit{canaries: 1000, noiseScale: 0.25})
		_, naive, _ := whiteboxTree(t, mech, treeAudit{canaries: 1000, noiseScale: 0.25, noWhiten: true})
		t.Logf("%s: claimed %.2f; whitened %.3f (noise x1), %.3f (x0.25); unwhitened %.3f (x0.25)", mech, claimed, ok.EpsilonLowerBound, broken.EpsilonLowerBound, naive.EpsilonLowerBound)
		if ok.EpsilonLowerBound > claimed {
			t.Errorf("%s: correct noise, lower bound %.3f exceeds the claim %.2f", mech, ok.EpsilonLowerBound, claimed)
		}
		if broken.EpsilonLowerBound <= claimed {
			t.Errorf("%s: noise x0.25, whitened lower bound %.3f does not exceed the claim %.2f", mech, broken.EpsilonLowerBound, claimed)
		}
		if naive.EpsilonLowerBound >= broken.EpsilonLowerBound {
			t.Errorf("%s: unwhitened bound %.3f not below the whitened %.3f", mech, naive.EpsilonLowerBound, broken.EpsilonLowerBound)
		}
	}
}

// The bug the issue names: a sensitivity computed for the wrong
// participation (single instead of the (4,16) the sampler realizes, so
// 2.5x too little noise). With 10,000 canaries both readings catch it;
// the correct calibration stays within the claim.
func TestAuditCatchesSensitivityForTheWrongParticipation(t *testing.T) {
	for _, mech := range []string{"tree-online", "tree-full", "mf-single"} {
		claimed, ok, okGDP := whiteboxTree(t, mech, treeAudit{canaries: 10000, noiseScale: 1})
		_, bug, bugGDP := whiteboxTree(t, mech, treeAudit{canaries: 10000, noiseScale: 1, singleSens: true})
		sigma, _ := privacy.GaussianSigma(claimed, 1e-5)
		mu := 1 / sigma
		t.Logf("%s: correct: eps >= %.3f, mu >= %.3f; single-participation sensitivity: eps >= %.3f, mu >= %.3f (claims eps %.2f, mu %.3f)",
			mech, ok.EpsilonLowerBound, okGDP.MuLowerBound, bug.EpsilonLowerBound, bugGDP.MuLowerBound, claimed, mu)
		if ok.EpsilonLowerBound > claimed || okGDP.MuLowerBound > mu {
			t.Errorf("%s: correct calibration audited above its claim: eps %.3f, mu %.3f", mech, ok.EpsilonLowerBound, okGDP.MuLowerBound)
		}
		if bug.EpsilonLowerBound <= claimed || bugGDP.MuLowerBound <= mu {
			t.Errorf("%s: wrong sensitivity not caught: eps %.3f (claim %.2f), mu %.3f (claim %.3f)", mech, bug.EpsilonLowerBound, claimed, bugGDP.MuLowerBound, mu)
		}
	}
}

func TestWhiteboxRejectsBadInput(t *testing.T) {
	good := WhiteboxConfig{Canaries: 10, Dim: 20, Steps: 5, ClipNorm: 1, NoiseStd: 1}
	cases := []func(*WhiteboxConfig){
		func(c *WhiteboxConfig) { c.Canaries = 1 },
		func(c *WhiteboxConfig) { c.Dim = 5 },
		func(c *WhiteboxConfig) { c.Steps = 0 },
		func(c *WhiteboxConfig) { c.NoiseStd = 0 },
		func(c *WhiteboxConfig) { c.ClipNorm = math.Inf(1) },
		func(c *WhiteboxConfig) { c.Participation = Participation{Amplified: true, Q: 1.5, Partitions: 1} },
		func(c *WhiteboxConfig) { c.Participation = Participation{Amplified: true, Q: 0.5, Partitions: 0} },
		func(c *WhiteboxConfig) { c.Canaries, c.Dim, c.Steps = 1<<20, 1<<20, 1<<10 },
	}
	for i, mod := range cases {
		c := good
		mod(&c)
		if _, err := NewWhitebox(c); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
	wb, err := NewWhitebox(good)
	if err != nil {
		t.Fatal(err)
	}
	sum := make([]float32, 20)
	if err := wb.Add(2, nil, sum); err == nil {
		t.Error("Add out of order: no error")
	}
	wb, _ = NewWhitebox(good)
	if err := wb.Add(1, []int{10}, sum); err == nil {
		t.Error("Add of canary 10 of 10: no error")
	}
	wb, _ = NewWhitebox(good)
	if _, err := wb.Scores(); err == nil {
		t.Error("Scores before the last step: no error")
	}
	if err := wb.Add(1, nil, sum[:3]); err == nil {
		t.Error("Add with a short sum: no error")
	}
}
