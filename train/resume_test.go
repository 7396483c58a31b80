package train

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/mfnoise"
)

// shortResumeConfig is a short private run with a checkpoint in dir.
func shortResumeConfig(t *testing.T, dir string) Config {
	cfg := faultConfig(t, dir)
	cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Output.MetricsPath = mfnoise.BandMF{Bands: 2}, 8, ""
	return cfg
}

// Issue 36 item 3: a resume that changes the seed (drops it, adds one, or
// gives another) is refused like any other setting: the checkpoint
// continues its generators, so the resumed run's claim about its noise
// ("ChaCha8 seeded from crypto/rand" after a seeded prefix) would be
// false. Before the fix all three resumed (seen failing).
func TestResumeWithOtherSeedRefused(t *testing.T) {
	seedA, seedB := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	cases := []struct {
		name      string
		was, now  []byte
		wantInMsg string
	}{
		{"seeded then crypto/rand", seedA, nil, "seed: checkpoint has given, asked for none (crypto/rand)"},
		{"crypto/rand then seeded", nil, seedA, "seed: checkpoint has none (crypto/rand), asked for given"},
		{"one seed then another", seedA, seedB, "seed: checkpoint has another seed than the one given"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := shortResumeConfig(t, t.TempDir())
			cfg.Privacy.Seed, cfg.Privacy.InsecureSeed = tc.was, false
			if _, err := Run(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			changed := cfg
			changed.Privacy.Seed = tc.now
			_, err := New(context.Background(), changed)
			if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), tc.wantInMsg) {
				t.Fatalf("resume: %v, want ErrCorruptCheckpoint naming %q", err, tc.wantInMsg)
			}
			if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "steps:") {
				t.Errorf("message is not one line naming only the seed: %v", err)
			}
			// The same seed (or none again) resumes, and the claim says
			// what the run did.
			tr, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatalf("resume with the same seed: %v", err)
			}
			if tr.Plan().Seeded != (tc.was != nil) {
				t.Errorf("plan seeded = %v after a resume of a run seeded = %v", tr.Plan().Seeded, tc.was != nil)
			}
		})
	}
}

// Issue 36 item 3 for a checkpoint written before the seed was recorded
// (the 3258d09 fixture, a seeded run): whether it was seeded is read from
// its plan, so it resumes with its seed and is refused without one.
func TestResumeOldCheckpointWithoutSeedRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := formatRunConfig(t, dir)
	cfg.Output.MetricsPath = ""
	copyFixture(t, "checkpoint-3258d09.ckpt", cfg.Output.CheckpointPath)
	unseeded := cfg
	unseeded.Privacy.Seed, unseeded.Privacy.InsecureSeed = nil, false
	_, err := New(context.Background(), unseeded)
	if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "seed: checkpoint has given, asked for none (crypto/rand)") {
		t.Fatalf("3258d09 seeded checkpoint resumed without a seed: %v", err)
	}
	if _, err := New(context.Background(), cfg); err != nil {
		t.Fatalf("3258d09 checkpoint with its seed: %v", err)
	}
}

// Issue 36 item 4: a checkpoint does not resume on other training data
// of the same size (one pixel or one label changed, or the examples in
// another order); the refusal names the data. Before the fix all resumed
// (seen failing).
func TestResumeOnOtherDataRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := shortResumeConfig(t, dir)
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(x []float32, y []int){
		"one pixel": func(x []float32, y []int) { x[5*16+3] += 1e-3 },
		"one label": func(x []float32, y []int) { y[1999] = (y[1999] + 1) % 2 },
		"swapped": func(x []float32, y []int) {
			a, b := x[0:16], x[16:32]
			for i := range a {
				a[i], b[i] = b[i], a[i]
			}
			y[0], y[1] = y[1], y[0]
		},
	} {
		changed := cfg
		other := *cfg.Data.Train
		other.X, other.Y = slices.Clone(cfg.Data.Train.X), slices.Clone(cfg.Data.Train.Y)
		edit(other.X, other.Y)
		changed.Data.Train = &other
		_, err := New(context.Background(), changed)
		if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "training data differs from the checkpoint's: digest ") {
			t.Errorf("%s: resume on other data: %v", name, err)
		}
	}
	// The same data, in a copy, resumes.
	same := cfg
	d := *cfg.Data.Train
	d.X, d.Y = slices.Clone(cfg.Data.Train.X), slices.Clone(cfg.Data.Train.Y)
	same.Data.Train = &d
	if _, err := New(context.Background(), same); err != nil {
		t.Fatalf("resume on the same data: %v", err)
	}
}

// Issue 36 item 10: evaluations on a validation split held out of the
// private training data are exact functions of private examples: the
// plan lists them as not covered, and each evaluation marks its keys.
// Before the fix neither did (seen failing).
func TestValidationMetricsNotCovered(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Data.Validation, cfg.Privacy.Steps = true, 4
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tr.Plan().NotCovered, func(s string) bool { return strings.Contains(s, "validation") && strings.Contains(s, "test_loss") }) {
		t.Errorf("plan's not covered outputs %q do not name the validation evaluations", tr.Plan().NotCovered)
	}
	em, err := tr.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	if em.Split != SplitValidation || !slices.Equal(em.NotPrivate, []string{"test_loss", "test_accuracy"}) {
		t.Errorf("validation evaluation: split %q, not private %q", em.Split, em.NotPrivate)
	}
	// A test set is not private data: nothing marked.
	cfg.Data.Validation = false
	if tr, err = New(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if em, _ := tr.Evaluate(); em.NotPrivate != nil || slices.ContainsFunc(tr.Plan().NotCovered, func(s string) bool { return strings.Contains(s, "validation") }) {
		t.Errorf("test-set evaluation marked not private: %q, %q", em.NotPrivate, tr.Plan().NotCovered)
	}
}

// A checkpoint written by SaveCheckpoint from a trainer built without
// Output.CheckpointPath binds its data and seed too.
func TestSavedCheckpointBindsDataAndSeed(t *testing.T) {
	ctx := context.Background()
	cfg := shortResumeConfig(t, t.TempDir())
	path := cfg.Output.CheckpointPath
	cfg.Output.CheckpointPath = ""
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.TrainStep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.SaveCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	cfg.Output.CheckpointPath = path
	other := cfg
	d := *cfg.Data.Train
	d.Y = slices.Clone(cfg.Data.Train.Y)
	d.Y[7] = 1 - d.Y[7]
	other.Data.Train = &d
	if _, err := New(ctx, other); !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "training data differs") {
		t.Errorf("other data: %v", err)
	}
	other = cfg
	other.Privacy.Seed = []byte("a different test seed")
	if _, err := New(ctx, other); !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "another seed") {
		t.Errorf("another seed: %v", err)
	}
	if tr, err := New(ctx, cfg); err != nil || tr.Step() != 1 {
		t.Fatalf("resume: %v", err)
	}
}
