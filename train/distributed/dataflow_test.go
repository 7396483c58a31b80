package distributed

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/clip/cliptest"
)

// TestExtremeExampleOnAWorker is the rule of docs/math.md (no
// data-dependent control flow) for the distributed workers: an extreme
// example in a worker's shard (a pixel of magnitude 10^30 to 3.4e38, a
// pixel at the CSV sentinel 3e38, or all pixels at
// +-3.4e38; Inf and NaN pixels written into the shard behind the
// dataset's own check) never makes the worker refuse, its partial sum is
// finite, a non-finite example is counted and contributes nothing, and a
// finite one contributes at most the clip norm exactly (the coordinator
// noises the partial as one example's clipped gradient). A run whose
// training set holds such examples completes on a worker with the
// parameters (bit for bit) and step metrics of the one-process run. (Failed before the
// fix: one example with every pixel at +-3.4e38 gave the logistic model's
// worker a partial sum of 1.335 clip norms, at clip norm 1e-5.)
func TestExtremeExampleOnAWorker(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 2))
	kinds := cliptest.Kinds()
	worst := 0.0
	for trial := range 60 {
		kind := kinds[trial%len(kinds)]
		cfg := testConfig(t, 3)
		cfg.Privacy.ClipNorm = math.Pow(10, -float64(trial%6))
		if trial%2 == 1 {
			cfg.Model.Name, cfg.Model.Hidden = "logistic", nil
		}
		w, err := newWorker(context.Background(), cfg, Shard{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		id := rng.IntN(w.data.Len())
		s := w.data.Shape.Size()
		x := w.data.X[id*s : (id+1)*s]
		cliptest.Corrupt(rng, kind, x)
		w.data.Y[id] = rng.IntN(10)
		params := slices.Clone(w.engine.Params())
		p := w.compute(encodeRequest(&request{digest: w.digest, step: 1, nonce: 7, ids: []int{id}, params: params}))
		if p.refusal != "" {
			t.Fatalf("trial %d (%s): the worker refused: %s", trial, kind, p.refusal)
		}
		sq := 0.0
		for _, v := range p.sum {
			if v-v != 0 {
				t.Fatalf("trial %d (%s): non-finite partial sum", trial, kind)
			}
			sq += float64(v) * float64(v)
		}
		if (kind == "inf" || kind == "nan") && (p.nonFinite != 1 || sq != 0) {
			t.Errorf("trial %d (%s): non-finite count %d, contribution norm %g: want 1 and 0", trial, kind, p.nonFinite, math.Sqrt(sq))
		}
		worst = max(worst, math.Sqrt(sq)/cfg.Privacy.ClipNorm)
		if math.Sqrt(sq) > cfg.Privacy.ClipNorm {
			t.Errorf("trial %d (%s): one example's partial sum has norm %.12g > clip norm %g (%.10g clip norms)", trial, kind, math.Sqrt(sq), cfg.Privacy.ClipNorm, math.Sqrt(sq)/cfg.Privacy.ClipNorm)
		}
	}
	if worst < 0.99 {
		t.Errorf("largest partial %g clip norms: no extreme example was clipped", worst)
	}

	// A whole run: every third example of the first 300 is extreme.
	cfg := testConfig(t, 4)
	s := cfg.Data.Train.Shape.Size()
	for id := 0; id < 300; id += 3 {
		x := cfg.Data.Train.X[id*s : (id+1)*s]
		if id%2 == 0 {
			x[rng.IntN(s)] = 3e38
			continue
		}
		for j := range x {
			x[j] = float32(math.MaxFloat32 * float64(1-2*rng.IntN(2)))
		}
	}
	_, one, stepsOne := run(t, cfg, 0)
	_, two, stepsTwo := run(t, cfg, 1)
	if !slices.Equal(one, two) {
		t.Errorf("the worker's parameters differ from one process's")
	}
	for i := range stepsOne {
		a, b := stepsOne[i], stepsTwo[i]
		if a.NonFinite != b.NonFinite || a.BatchSize != b.BatchSize {
			t.Errorf("step %d: non-finite %d, batch %d on the worker, %d and %d in one process", a.Step, b.NonFinite, b.BatchSize, a.NonFinite, a.BatchSize)
		}
	}
}
