package train

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/mfnoise"
)

// A step that fails while gathering its batch must leave no trace: the next
// successful step draws batch i and pairs it with noise row i, exactly as an
// uninterrupted run does. Before steps were all-or-nothing the sampler
// advanced and the noise did not, so every later batch met the wrong row.
func TestFailedStepLeavesSamplerAndNoiseInStep(t *testing.T) {
	ctx := context.Background()
	for _, mech := range []string{"dpsgd", "bandmf:4"} {
		t.Run(mech, func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier = parseMech(t, mech), 12, 1
			straight, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg2 := cfg
			cfg2.Data.Train = blobs(t, 2000, 1) // its own copy, to break
			interrupted, err := New(ctx, cfg2)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 12; i++ {
				if i == 5 {
					// A data gather error mid-step: every index is out
					// of range.
					labels := cfg2.Data.Train.Y
					cfg2.Data.Train.Y = labels[:0]
					if _, err := interrupted.TrainStep(ctx); err == nil {
						t.Fatal("step with unreadable data succeeded")
					} else {
						t.Logf("injected failure: %v", err)
					}
					cfg2.Data.Train.Y = labels
					if s, n := interrupted.sampler.Step(), interrupted.noise.Step(); s != 5 || n != 5 {
						t.Fatalf("after the failed step 6: sampler at %d, noise at %d, want both at 5", s, n)
					}
				}
				if _, err := straight.TrainStep(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := interrupted.TrainStep(ctx); err != nil {
					t.Fatal(err)
				}
			}
			a, b := interrupted.Model().Params(), straight.Model().Params()
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("parameter %d = %v after a failed step, %v uninterrupted", i, a[i], b[i])
				}
			}
		})
	}
}

// A checkpoint whose sampler and noise source are at different steps is
// refused on load, whichever counter is off.
func TestCheckpointWithDriftedCountersIsRefused(t *testing.T) {
	ctx := context.Background()
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier = mfnoise.BandMF{Bands: 4}, 12, 1
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := tr.TrainStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.SaveCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	// Drift the noise source by one row, as the old TrainStep did, and
	// write the state as it stood: SaveCheckpoint refuses it, so write the
	// drifted state with the checks bypassed.
	if err := tr.noise.Next(tr.noiseBuf); err != nil {
		t.Fatal(err)
	}
	if err := tr.SaveCheckpoint(ckpt); err == nil {
		t.Fatal("saved a checkpoint with the noise a step ahead of the sampler")
	}
	if err := tr.saveCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	cfg.Output.CheckpointPath = ckpt
	if _, err := New(ctx, cfg); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("drifted checkpoint: want ErrCorruptCheckpoint, got %v", err)
	} else {
		t.Logf("refused: %v", err)
	}
}

// A failure after the noise is drawn (here an overflowing noise scale)
// cannot be rolled back: the trainer refuses every further step and every
// checkpoint, and a trainer rebuilt from the last checkpoint goes on.
func TestFailureAfterNoiseBreaksTrainerUntilRebuilt(t *testing.T) {
	ctx := context.Background()
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Privacy.NoiseMultiplier = mfnoise.BandMF{Bands: 4}, 12, 1
	cfg.Output.CheckpointPath = ckpt
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := tr.TrainStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.SaveCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	std := tr.plan.NoiseStd
	tr.plan.NoiseStd = math.MaxFloat64 // +Inf in float32
	if _, err := tr.TrainStep(ctx); !errors.Is(err, ErrBroken) {
		t.Fatalf("overflowing noise: want ErrBroken, got %v", err)
	}
	tr.plan.NoiseStd = std
	if _, err := tr.TrainStep(ctx); !errors.Is(err, ErrBroken) {
		t.Fatalf("step after a broken one: want ErrBroken, got %v", err)
	}
	if err := tr.SaveCheckpoint(ckpt); err == nil {
		t.Fatal("a broken trainer saved a checkpoint")
	}
	again, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again.Step() != 3 {
		t.Fatalf("rebuilt at step %d, want 3", again.Step())
	}
	if _, err := again.TrainStep(ctx); err != nil {
		t.Fatal(err)
	}
}
