package train

import (
	"context"
	"errors"
	"testing"
)

// TestDivergedRunStops: a learning rate far too large sends the
// parameters towards infinity. The engines drop the examples whose loss
// or gradient is then not finite (each contributes zero), so the sums
// stay finite and, without these checks, the run went on to its end and
// reported a NaN test loss. It must stop with ErrDiverged: without
// privacy at the first batch none of whose examples is finite (the step
// rolls back, so every later call says the same); with privacy, where
// the data may not steer control flow, at the first update that leaves a
// parameter non-finite (the trainer is then broken).
func TestDivergedRunStops(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nonPrivate bool
		clip       float64
		next       error
	}{
		{"non-private", true, 1, ErrDiverged},
		{"private", false, 1e6, ErrBroken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.NonPrivate, cfg.Privacy.ClipNorm = tc.nonPrivate, tc.clip
			cfg.Optimizer = Optimizer{LearningRate: 1e38, Momentum: 0.9}
			tr, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range cfg.Privacy.Steps {
				if _, err = tr.TrainStep(context.Background()); err != nil {
					break
				}
			}
			if !errors.Is(err, ErrDiverged) {
				t.Fatalf("after %d steps: error %v, want ErrDiverged", tr.Step(), err)
			}
			if _, again := tr.TrainStep(context.Background()); !errors.Is(again, tc.next) {
				t.Errorf("the step after: %v, want %v", again, tc.next)
			}
		})
	}
}
