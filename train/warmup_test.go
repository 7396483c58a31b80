package train

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
)

// The warm-up composes with the cooldown: over 20 steps with a warm-up
// of 5 and a cooldown over the last 5 (fraction 0.25), the optimizer's
// rates, and the workload a matrix mechanism is factorized for, are
// lr*t/5 for t <= 5, then lr, then lr times the cooldown's factor
// 1 - 0.95*j/4 on the last five steps j = 0..4.
func TestWarmupComposesWithCooldown(t *testing.T) {
	const lr, steps, warm = 0.4, 20, 5
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism = parseMech(t, "bandmf:2")
	cfg.Privacy.Steps, cfg.Privacy.Accountant = steps, privacy.RDP
	cfg.Optimizer = Optimizer{LearningRate: lr, Momentum: 0.9, CooldownFrac: 0.25, Warmup: &Warmup{Steps: warm}}
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tr.opt.Workload(steps)
	if err != nil {
		t.Fatal(err)
	}
	rates, err := w.Schedule.Rates(steps)
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range rates {
		want := lr
		if i < warm {
			want = lr * float64(i+1) / warm
		}
		if j := i - (steps - 5); j >= 0 {
			want *= 1 - 0.95*float64(j)/4
		}
		if math.Abs(got-want) > 1e-15 {
			t.Errorf("step %d: rate %v, want %v", i+1, got, want)
		}
	}
	// The plan is built for the warmed-up workload: its mechanism's
	// loss differs from the one without the warm-up.
	cfg.Optimizer.Warmup = nil
	cold, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := tr.Plan().Loss, cold.Plan().Loss; a == b || a == 0 {
		t.Errorf("mechanism loss %v with the warm-up, %v without: the plan did not see the warm-up", a, b)
	}
}

// A warm-up of W steps makes the first step the step of learning rate
// lr/W, bit for bit, and the second a larger one.
func TestWarmupFirstStepIsScaled(t *testing.T) {
	ctx := context.Background()
	run := func(lr float64, warm *Warmup) [2][]float32 {
		cfg := baseConfig(t)
		cfg.NonPrivate, cfg.Privacy.Steps = true, 8
		cfg.Optimizer = Optimizer{LearningRate: lr, Warmup: warm}
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var out [2][]float32
		for i := range out {
			if _, err := tr.TrainStep(ctx); err != nil {
				t.Fatal(err)
			}
			out[i] = slices.Clone(tr.Model().Params())
		}
		return out
	}
	warm, plain := run(0.5, &Warmup{Steps: 4}), run(0.125, nil)
	sameParams(t, warm[0], plain[0], "first step of a warm-up of 4 at lr 0.5 vs lr 0.125")
	if slices.Equal(warm[1], plain[1]) {
		t.Fatal("the second step of the warm-up (lr 0.25) equals a step at lr 0.125")
	}
}

// A warm-up is refused when it is not a number of steps within the run,
// and a checkpoint of a warmed-up run does not resume a run without it.
func TestWarmupRefusals(t *testing.T) {
	ctx := context.Background()
	for _, w := range []Warmup{{0}, {-1}, {41}} {
		cfg := baseConfig(t)
		cfg.Optimizer.Warmup = &w
		if _, err := New(ctx, cfg); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "warm-up") {
			t.Errorf("warm-up %d: %v, want ErrInvalid about the warm-up", w.Steps, err)
		}
	}
	cfg := baseConfig(t)
	cfg.Optimizer.Warmup = &Warmup{Steps: 10}
	cfg.Output.CheckpointPath = filepath.Join(t.TempDir(), "run.ckpt")
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.TrainStep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.SaveCheckpoint(cfg.Output.CheckpointPath); err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer.Warmup = nil
	if _, err := New(ctx, cfg); !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "warm-up steps: checkpoint has 10") {
		t.Fatalf("resumed a warmed-up checkpoint without the warm-up: %v", err)
	}
}
