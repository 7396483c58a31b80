package train

import (
	"context"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/optim"
	"gonum.org/v1/gonum/mat"
)

// recorder is an optimizer that records the gradient each step receives and
// leaves the parameters alone, so the clipped sum of any step can be
// recomputed at the same parameters afterwards.
type recorder struct {
	optim.Optimizer // workload only
	grads           [][]float32
}

func (r *recorder) Step(_, grad []float32) error {
	r.grads = append(r.grads, append([]float32(nil), grad...))
	return nil
}
func (r *recorder) StepIndex() int { return len(r.grads) }

// The noise actually added to each step's clipped sum, recovered from what
// the optimizer receives and whitened with the mechanism's own noise
// covariance G G^T (G = A^-1 B, the map from the i.i.d. rows Z to the
// gradient-space noise), must have standard deviation sigma * zeta * sens,
// with the sensitivity computed here by brute force over the participation
// patterns: ||C u|| for the indicator u of each pattern (exact for these
// encoders, whose C^T C is non-negative within each pattern, which the test
// checks). Tree and banded encoders under (k,b) = (5,8) have sens != 1.
//
// n*d = 40*68 = 2720 whitened samples estimate the standard deviation to
// about 1/sqrt(2*2720) = 1.4%; the tolerance is 5%, so a scale off by 10%
// (7 standard errors) fails. The seed is fixed.
func TestNoiseAddedHasScaleSigmaZetaSens(t *testing.T) {
	cases := []struct {
		mech     string
		sampling privacy.Sampling
		wantSens float64 // 0: not known in closed form
	}{
		{"dpsgd", privacy.SamplingPoisson, 1}, // amplified: one participation, C = I
		// 400 examples in batches of 50 over 40 steps: fixed-order epochs
		// realize (k,b) = (5,8).
		{"tree-online", privacy.SamplingFixedOrder, 0},
		{"bandmf:4", privacy.SamplingFixedOrder, math.Sqrt(5)}, // banded-MF Thm 2
		{"mf-kb", privacy.SamplingFixedOrder, 1},               // normalized by its optimizer
	}
	const sigma, zeta = 0.7, 0.3
	for _, tc := range cases {
		t.Run(tc.mech, func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Data.Train = blobs(t, 400, 1)
			cfg.Privacy.Mechanism, cfg.Privacy.Sampling, cfg.Privacy.Steps = parseMech(t, tc.mech), tc.sampling, 40
			cfg.Privacy.NoiseMultiplier, cfg.Privacy.ClipNorm, cfg.Optimizer.Momentum = sigma, zeta, 0.9
			tr, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{Optimizer: tr.opt}
			tr.opt = rec
			n, d := cfg.Privacy.Steps, tr.model.NumParams()
			noise := mat.NewDense(n, d, nil)
			clipped := make([]float32, d)
			div := tr.sampler.ExpectedBatch()
			for i := 0; i < n; i++ {
				if _, err := tr.TrainStep(context.Background()); err != nil {
					t.Fatal(err)
				}
				sum := make([]float64, d)
				for lo := 0; lo < len(tr.idx); lo += len(tr.yb) {
					x, y, err := tr.gather(tr.idx[lo:min(lo+len(tr.yb), len(tr.idx))], i+1)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := tr.engine.ClippedSumContext(context.Background(), x, y, clipped); err != nil {
						t.Fatal(err)
					}
					for j, v := range clipped {
						sum[j] += float64(v)
					}
				}
				for j, g := range rec.grads[i] {
					noise.Set(i, j, float64(g)*div-sum[j])
				}
			}

			f, err := tr.plan.Factorization()
			if err != nil {
				t.Fatal(err)
			}
			// Amplified accounting charges each participation separately:
			// its sensitivity is that of a single participation.
			schema := tr.plan.Schema
			if tr.plan.Amplified {
				schema = dpcore.SingleParticipation()
			}
			sens, exact := bruteSensitivity(t, f.Encoder, schema, n)
			if !exact {
				// mf-kb's C^T C has negative entries: the planner's value
				// (an upper bound) is what the noise must be scaled to.
				t.Logf("C^T C has negative entries: brute force gives %.6g, planner %.6g (%s)", sens, tr.plan.Sensitivity.Value, tr.plan.Sensitivity.Method)
				sens = tr.plan.Sensitivity.Value
			}
			if tc.wantSens != 0 && math.Abs(sens-tc.wantSens) > 1e-9 {
				t.Fatalf("brute-force sensitivity %v, want %v", sens, tc.wantSens)
			}
			if tc.wantSens != 1 && math.Abs(sens-1) < 1e-3 {
				t.Fatalf("sensitivity %v: the case should exercise sens != 1", sens)
			}

			// Whiten: noise = s * G Z with Z i.i.d. N(0,1); L L^T = G G^T.
			g := noiseMap(t, f, n)
			var cov mat.SymDense
			cov.SymOuterK(1, g)
			var chol mat.Cholesky
			if !chol.Factorize(&cov) {
				t.Fatal("G G^T is not positive definite")
			}
			var l mat.TriDense
			chol.LTo(&l)
			var white mat.Dense
			if err := white.Solve(&l, noise); err != nil {
				t.Fatal(err)
			}
			var ss float64
			for i := 0; i < n; i++ {
				for _, v := range white.RawRowView(i) {
					ss += v * v
				}
			}
			got := math.Sqrt(ss / float64(n*d))
			want := sigma * zeta * sens
			t.Logf("%s (%v): measured noise std %.5g, sigma*zeta*sens = %.5g (sens %.5g), ratio %.4f", tc.mech, tr.plan.Schema, got, want, sens, got/want)
			if math.Abs(got/want-1) > 0.05 {
				t.Fatalf("noise std %.5g, want sigma*zeta*sens = %.5g within 5%%", got, want)
			}
		})
	}
}

// noiseMap is G = A^-1 B (C^-1 for a square encoder; I for DP-SGD).
func noiseMap(t *testing.T, f *mfnoise.Factorization, n int) *mat.Dense {
	t.Helper()
	a, err := f.Workload.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	var g mat.Dense
	if err := g.Solve(a, f.Decoder); err != nil {
		t.Fatal(err)
	}
	return &g
}

// bruteSensitivity is max over the schema's patterns of ||C u||, after
// checking that C^T C is non-negative on every pattern's entries (then the
// worst contribution under a pattern is the all-ones one, clipped at norm
// 1). exact is false when it is not.
func bruteSensitivity(t *testing.T, c *mat.Dense, s dpcore.Schema, n int) (sens float64, exact bool) {
	t.Helper()
	var gram mat.Dense
	gram.Mul(c.T(), c)
	exact = true
	rows, _ := c.Dims()
	best := 0.0
	for _, p := range s.Patterns(n) {
		for _, i := range p {
			for _, j := range p {
				if gram.At(i, j) < -1e-12 {
					exact = false
				}
			}
		}
		var ss float64
		for r := 0; r < rows; r++ {
			var v float64
			for _, j := range p {
				v += c.At(r, j)
			}
			ss += v * v
		}
		best = math.Max(best, math.Sqrt(ss))
	}
	return best, exact
}
