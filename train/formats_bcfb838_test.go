package train

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

// Checkpoints written by the release at commit bcfb838 (testdata/formats)
// of runs with the optional features whose state a checkpoint holds: the
// parameter average (EMA), augmentation with multiplicity, and user-level
// privacy. Each was written by New, TrainStep up to its step and
// SaveCheckpoint on the configurations below.

// fixtureFeatureConfig: augmentation with multiplicity 2 and a parameter
// average, tree-online (an exact encoder), interrupted after step 13.
func fixtureFeatureConfig(t testing.TB) Config {
	cfg := baseConfig(t)
	cfg.Data.Train, cfg.Data.Test = images(t, 600, 1, 3), images(t, 100, 1, 4)
	cfg.Privacy.Mechanism = parseMech(t, "tree-online")
	cfg.Privacy.Steps, cfg.Optimizer.Momentum, cfg.Optimizer.LearningRate, cfg.Privacy.Accountant = 30, 0.9, 0.1, privacy.RDP
	cfg.Output.EvalEvery = 5
	cfg.Optimizer.EMA, cfg.Data.Augment = &EMA{Decay: 0.9}, &Augmentation{Multiplicity: 2}
	return cfg
}

// fixtureUserConfig: user-level privacy with 3 examples a user and a
// parameter average, interrupted after step 3.
func fixtureUserConfig(t *testing.T) Config {
	return Config{
		Data:      Data{Train: ownedSynthetic(t, 400, 60, 5)},
		Model:     ModelSpec{Name: "mlp", Hidden: []int{6}},
		Privacy:   privacy.Request{Steps: 8, Batch: 12, Mechanism: parseMech(t, "tree-online"), NoiseMultiplier: 1, ClipNorm: 0.5, Accountant: privacy.RDP, Seed: []byte("user-level resume test"), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: 3}},
		Optimizer: Optimizer{Momentum: 0.9, LearningRate: 0.1, EMA: &EMA{Decay: 0.8}},
		Output:    Output{EvalEvery: 100},
	}
}

// TestFormatFeatureCheckpointsbcfb838: each run resumes from its
// checkpoint at the step it was written and ends, parameter average
// installed, bit for bit where the uninterrupted run ends.
func TestFormatFeatureCheckpointsbcfb838(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		file string
		cfg  func(*testing.T) Config
		at   int
	}{
		{"features-bcfb838.ckpt", func(t *testing.T) Config { return fixtureFeatureConfig(t) }, 13},
		{"users-bcfb838.ckpt", fixtureUserConfig, 3},
	} {
		t.Run(c.file, func(t *testing.T) {
			run := func(ckpt string) ([]float32, *Result) {
				cfg := c.cfg(t)
				m, err := NewModel(cfg)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Model.Built, cfg.Output.CheckpointPath = m, ckpt
				res, err := Run(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				return m.Params(), res
			}
			path := filepath.Join(t.TempDir(), "run.ckpt")
			copyFixture(t, c.file, path)
			resumed, res := run(path)
			if res.Resumed != c.at {
				t.Fatalf("resumed from step %d, want %d", res.Resumed, c.at)
			}
			whole, _ := run("")
			sameParams(t, resumed, whole, "resumed from the bcfb838 checkpoint")
		})
	}
}
