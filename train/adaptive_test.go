package train

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/privacy"
)

type fakeNorm struct{ c float64 }

func (f *fakeNorm) SetNorm(c float64) error { f.c = c; return nil }

// The private quantile estimate converges: on per-example norms drawn
// from a log-normal distribution (median 1, log-sd 1), with Poisson batches
// of expected size 1000, the default count noise (batch/20) and rate 0.2,
// the clip norm started 100x too small ends, averaged over the last 200 of
// 600 steps, where the true quantile is: the fraction of the distribution
// below it is within 0.03 of the target, for targets 0.2, 0.5 and 0.9
// (fixed seeds).
func TestAdaptiveClipConvergesToQuantile(t *testing.T) {
	const batch, steps = 1000, 600
	for _, target := range []float64{0.2, 0.5, 0.9} {
		r := rand.New(rand.NewPCG(1, uint64(target*10)))
		eng := &fakeNorm{}
		a := &adaptiveClip{
			q:  privacy.QuantileRelease{Target: target, NoiseStd: batch / 20.0, LearningRate: 0.2},
			c0: 0.01, c: 0.01, expected: batch, eng: eng, rng: rand.New(rand.NewPCG(2, 3)),
		}
		var tail []float64
		for s := range steps {
			a.batch(nil)
			// A Poisson batch: its size varies around the expected one.
			n := int(math.Round(batch + math.Sqrt(batch)*r.NormFloat64()))
			within := 0
			for range n {
				if math.Exp(r.NormFloat64()) <= a.c {
					within++
				}
			}
			a.observe(clip.Stats{WithinNorm: within})
			if err := a.afterUpdate(&StepMetrics{BatchSize: n}); err != nil {
				t.Fatal(err)
			}
			if eng.c != a.c {
				t.Fatalf("the engine's norm %v is not the estimate %v", eng.c, a.c)
			}
			if s >= steps-200 {
				tail = append(tail, math.Log(a.c))
			}
		}
		mean := 0.0
		for _, v := range tail {
			mean += v
		}
		mean /= float64(len(tail))
		// The fraction of a log-normal(0, 1) below exp(mean).
		frac := 0.5 * math.Erfc(-mean/math.Sqrt2)
		if math.Abs(frac-target) > 0.03 {
			t.Fatalf("target %v: the clip norm settled at %v, the %.3f quantile", target, math.Exp(mean), frac)
		}
		t.Logf("target %v: clip norm %.4f, the %.4f quantile (true %.4f)", target, math.Exp(mean), frac, math.Exp(math.Sqrt2*math.Erfinv(2*target-1)))
	}
}

// The step clips at C_t and noises at C_t: after steps that moved the clip
// norm, the engine clips at the norm the step reports, one example's
// contribution is at most C_t (and reaches it: clipped at C_t, not C_0),
// and the noise added is the plan's std scaled by C_t/C_0.
func TestAdaptiveClipStepUsesCurrentNorm(t *testing.T) {
	ctx := context.Background()
	cfg := Config{
		Data:      Data{Train: images(t, 400, 1e3, 5)},
		Model:     ModelSpec{Name: "logistic"},
		Privacy:   privacy.Request{Steps: 20, Batch: 50, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 0.01, Quantile: &privacy.QuantileRelease{Target: 0.5, LearningRate: 0.5}, Seed: []byte("adaptive clipping step"), InsecureSeed: true},
		Optimizer: Optimizer{LearningRate: 0.1},
	}
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng := tr.engine.(*clip.Engine)
	for range 10 {
		before := eng.Norm()
		sm, err := tr.TrainStep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sm.ClipNorm != before {
			t.Fatalf("step %d reports clip norm %v, the engine clipped at %v", sm.Step, sm.ClipNorm, before)
		}
	}
	ct := eng.Norm()
	if r := ct / cfg.Privacy.ClipNorm; r < 1.5 && r > 1/1.5 {
		t.Fatalf("the clip norm did not move from %v: %v (the test needs it to)", cfg.Privacy.ClipNorm, ct)
	}
	worst := 0.0
	for i := range 50 {
		if _, err := tr.clipChunk(ctx, []int{i}, 11); err != nil {
			t.Fatal(err)
		}
		n := math.Sqrt(sqNorm(tr.chunk))
		if n > ct {
			t.Fatalf("example %d contributes %v > C_t = %v", i, n, ct)
		}
		worst = max(worst, n)
	}
	if worst < 0.999*ct {
		t.Fatalf("largest contribution %v, C_t = %v: not clipped at C_t", worst, ct)
	}
	// The noise: a zero clipped sum plus the step's noise, as applyUpdate
	// adds it.
	clear(tr.sum)
	for i := range tr.noiseBuf {
		tr.noiseBuf[i] = 1
	}
	if err := tr.noise.Next(tr.noiseBuf); err != nil {
		t.Fatal(err)
	}
	w := slices.Clone(tr.noiseBuf)
	saved := slices.Clone(tr.engine.Params())
	if err := tr.applyUpdate(11, 50); err != nil {
		t.Fatal(err)
	}
	copy(tr.engine.Params(), saved)
	div := tr.sampler.ExpectedBatch()
	want := tr.plan.NoiseStd * ct / cfg.Privacy.ClipNorm
	for i, v := range tr.sum {
		if got := float64(v) * div; math.Abs(got-want*float64(w[i])) > 1e-4*math.Abs(want*float64(w[i]))+1e-6 {
			t.Fatalf("coordinate %d: noise %v, want %v x %v (std at C_t)", i, got, want, w[i])
		}
	}
}

// At user level the count is of users: with a clip norm above every
// user's combined gradient, every sampled user is counted, for one and
// for several examples a user (before the user-level path observed the
// count it released zero plus noise, and the clip norm only shrank).
func TestAdaptiveClipCountsUsers(t *testing.T) {
	ctx := context.Background()
	for _, k := range []int{1, 3} {
		cfg := Config{
			Data:      Data{Train: ownedSynthetic(t, 600, 120, 4)},
			Model:     ModelSpec{Name: "logistic"},
			Privacy:   privacy.Request{Steps: 5, Batch: 30, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 1e6, Quantile: &privacy.QuantileRelease{Target: 0.5}, Seed: []byte("adaptive clipping users"), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: k}},
			Optimizer: Optimizer{LearningRate: 0.1},
		}
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sm, err := tr.TrainStep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := tr.private[0].(*adaptiveClip)
		if a.within != sm.BatchSize || sm.BatchSize == 0 {
			t.Fatalf("k = %d: %d users counted within the norm, %d sampled", k, a.within, sm.BatchSize)
		}
	}
}
