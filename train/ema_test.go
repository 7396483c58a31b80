package train

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestEMAIsPostProcessing checks that parameter averaging never touches
// the private computation: with the same seed, a run with EMA releases
// exactly the same noisy sums and takes exactly the same parameter
// trajectory as a run without, spends the same epsilon, and its average
// is the EMA recomputed from that public trajectory alone. Evaluation
// reads the average, and the ledger lists it.
func TestEMAIsPostProcessing(t *testing.T) {
	ctx := context.Background()
	type trace struct {
		released, params [][]float32
		tr               *Trainer
	}
	run := func(ema float64) trace {
		cfg := baseConfig(t)
		cfg.Optimizer.Momentum, cfg.Optimizer.LearningRate = 0.9, 0.1
		if ema > 0 {
			cfg.Optimizer.EMA = &EMA{Decay: ema}
		}
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var tc trace
		tc.tr = tr
		for !tr.Done() {
			if _, err := tr.TrainStep(ctx); err != nil {
				t.Fatal(err)
			}
			// After a step t.sum holds the released noisy sum over B.
			tc.released = append(tc.released, slices.Clone(tr.sum))
			tc.params = append(tc.params, slices.Clone(tr.Model().Params()))
		}
		return tc
	}
	plain, avg := run(0), run(0.95)
	if len(plain.released) != 40 || len(avg.released) != 40 {
		t.Fatalf("released %d and %d sums, want 40", len(plain.released), len(avg.released))
	}
	for s := range plain.released {
		if !slices.Equal(plain.released[s], avg.released[s]) {
			t.Fatalf("step %d: the released noisy sum differs with EMA", s+1)
		}
		if !slices.Equal(plain.params[s], avg.params[s]) {
			t.Fatalf("step %d: the parameters differ with EMA", s+1)
		}
	}
	if plain.tr.Plan().Epsilon != avg.tr.Plan().Epsilon {
		t.Errorf("epsilon %v with EMA, %v without", avg.tr.Plan().Epsilon, plain.tr.Plan().Epsilon)
	}
	// Recompute the average from the initial parameters and the trajectory.
	init, err := NewModel(baseConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(init.Params())
	for s, p := range avg.params {
		b := float32(min(0.95, float64(2+s)/float64(11+s)))
		for i := range want {
			want[i] = b*want[i] + (1-b)*p[i]
		}
	}
	if !slices.Equal(avg.tr.ema.avg, want) {
		t.Fatal("the average is not the EMA of the parameter trajectory")
	}
	if slices.Equal(want, avg.params[len(avg.params)-1]) {
		t.Fatal("the average equals the last iterate: the test cannot tell them apart")
	}
	// Evaluation reads the average and leaves the iterate in place.
	em, err := avg.tr.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	last := avg.params[len(avg.params)-1]
	if !slices.Equal(avg.tr.Model().Params(), last) {
		t.Fatal("evaluation changed the parameters")
	}
	copy(plain.tr.Model().Params(), want)
	ref, err := plain.tr.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	if em.Loss != ref.Loss || em.Accuracy != ref.Accuracy {
		t.Errorf("evaluation with EMA: loss %v, accuracy %v; the average's: %v, %v", em.Loss, em.Accuracy, ref.Loss, ref.Accuracy)
	}
	if !strings.Contains(strings.Join(avg.tr.Plan().Assumptions(), "\n"), "moving average of the parameters (decay 0.95)") {
		t.Errorf("the ledger does not list the average: %q", avg.tr.Plan().Assumptions())
	}
	if strings.Contains(strings.Join(plain.tr.Plan().Assumptions(), "\n"), "moving average") {
		t.Error("the ledger lists an average the run did not take")
	}
}
