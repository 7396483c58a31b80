package train

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/optim"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/sampler"
)

// Trainer runs a configured training loop one step at a time, for services
// that drive training themselves. Build it with New.
type Trainer struct {
	cfg     Config
	plan    *privacy.Plan // nil for a non-private run
	model   models.Model
	backend Backend // cfg.Model.Backend (then model is nil), or model on the nn executor
	engine  Engine
	sampler sampler.Sampler
	noise   noise.Source
	opt     optim.Optimizer
	eps     float64 // epsilon after the last evaluated step
	// broken is set when a step failed after its noise was drawn (see
	// ErrBroken); every later step returns it.
	broken error

	// The step's buffers.
	idx                  []int
	xb                   []float32
	yb                   []int
	sum, chunk, noiseBuf []float32
	augment              data.Augmenter
	groups               []int // augmentation multiplicity's groups (augmult.go)
	exIdx                []int // a user-level step's examples
	// pieces: an engine batch (engineBatch examples at most) larger
	// than len(yb) is gathered in physical pieces (physical.go).
	pieces      bool
	engineBatch int

	// clippedSum computes a step's clipped sum (clipsum.go); users is the
	// user-level side of the run (nil at example level).
	clippedSum func(ctx context.Context, step int, sm *StepMetrics) error
	users      *userLevel
	// private are the private features' sides of the step (hooks.go),
	// hooks the non-private work after each step: the parameter average
	// (ema, nil without one), the metrics (metrics, nil without a file)
	// and Config.Hooks.
	private []stepHook
	hooks   []Hook
	ema     *average
	metrics *metricsWriter

	settings []setting // the configuration as given, recorded in checkpoints
	// seedFP, dataSalt and dataDigest are recorded in checkpoints too
	// (resumecheck.go).
	seedFP, dataSalt, dataDigest []byte
	features                     []FeaturesDone // how the features were got (Result.Features)
}

// New checks the configuration, builds the privacy plan (refusing any
// combination whose guarantee does not hold), the model, the clipping
// engine, the sampler, the noise source and the optimizer, and attaches
// the optional features. If cfg.Output.CheckpointPath names an existing
// checkpoint, the run resumes from it.
func New(ctx context.Context, cfg Config) (*Trainer, error) {
	cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Trainer{}
	if err := t.newBackend(&cfg); err != nil {
		return nil, err
	}
	maxBatch, err := t.newEngine(&cfg)
	if err != nil {
		return nil, err
	}
	d := len(t.engine.Params())
	t.settings = cfg.settings(sized{t.backend.Name(), d})
	t.seedFP = seedFingerprint(cfg.Privacy.Seed)
	switch {
	case cfg.Output.CheckpointPath != "":
		// A resume with other settings is refused before the plan (and
		// its factorization, minutes for long runs) is built.
		if err := t.checkResume(cfg.Output.CheckpointPath, &cfg); err != nil {
			return nil, err
		}
	case cfg.Data.Features != FeaturesPixels:
		// Recorded now, for a checkpoint saved by SaveCheckpoint: the
		// training data are replaced by their features below.
		t.recordData(cfg.Data.Train)
	}
	// The features (a minute or more for 60,000 images, unless cached)
	// after every cheap refusal.
	if t.features, err = applyFeatures(ctx, &cfg); err != nil {
		return nil, err
	}
	t.cfg = cfg
	if err := t.checkData(&cfg.Data); err != nil {
		return nil, err
	}
	if err := t.newOptimizer(&cfg.Optimizer, cfg.Privacy.Steps, d); err != nil {
		return nil, err
	}
	if err := t.newSampling(ctx, &cfg, d); err != nil {
		return nil, err
	}
	var physical int
	physical, t.pieces = t.physicalExamples(&cfg, maxBatch)
	t.engineBatch = maxBatch
	if err := t.allocate(&cfg, physical, d); err != nil {
		return nil, err
	}
	t.attachHooks(&cfg)
	if err := t.resume(&cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// Plan is the run's privacy plan (nil for a non-private run).
func (t *Trainer) Plan() *privacy.Plan { return t.plan }

// Model is the model being trained; nil when Config.Model.Backend is set.
func (t *Trainer) Model() models.Model { return t.model }

// Engine is the engine computing the run's clipped gradient sums.
func (t *Trainer) Engine() Engine { return t.engine }

// Step is the number of steps done.
func (t *Trainer) Step() int { return t.sampler.Step() }

// Done reports whether all steps ran.
func (t *Trainer) Done() bool { return t.Step() >= t.cfg.Privacy.Steps }

// ErrBroken is wrapped by every call on a Trainer whose last step failed
// after its noise was drawn: sampler and noise advanced but the model did
// not, so the trainer refuses to go on until it is rebuilt (New) from a
// checkpoint. Only an arithmetic overflow in the noisy sum can cause it;
// every earlier failure (data, clipping, context) rolls the step back.
var ErrBroken = errors.New("trainer broken by a failed step")

// TrainStep runs one step: sample (the private features may split the
// batch), clipped sum, noise (the features see the sum before and after
// it), divide by the expected batch size, optimizer update, then the
// private features' afterUpdate and the hooks (Hook). A step is
// all-or-nothing: on an error before the update the sampler is restored,
// so the next call draws the same batch and pairs it with the same noise
// row; the sampler, the noise source, the model and the optimizer advance
// together or not at all. An error of a Hook is returned after the step,
// which stands.
func (t *Trainer) TrainStep(ctx context.Context) (StepMetrics, error) {
	if t.broken != nil {
		return StepMetrics{}, t.broken
	}
	if err := ctx.Err(); err != nil {
		return StepMetrics{}, err
	}
	start := time.Now()
	// What the step will spend does not depend on its data: account for it
	// before anything changes.
	var eps float64
	if t.plan != nil {
		var err error
		if eps, err = t.plan.EpsilonSpent(t.Step() + 1); err != nil {
			return StepMetrics{}, fmt.Errorf("train: step %d: accounting: %w", t.Step()+1, err)
		}
	}
	// The sampler state is a few hundred bytes: saving it every step is
	// what lets a failed gather or clip leave the run where it was.
	saved, err := t.sampler.MarshalBinary()
	if err != nil {
		return StepMetrics{}, fmt.Errorf("train: step %d: saving sampler state: %w", t.Step()+1, err)
	}
	sm, err := t.sampleAndClip(ctx)
	if err == nil && t.plan != nil {
		// The noise source checks its arguments before advancing, so an
		// error here leaves it at the previous step.
		if nerr := t.noise.Next(t.noiseBuf); nerr != nil {
			err = fmt.Errorf("train: step %d: noise: %w", sm.Step, nerr)
		}
	}
	if err != nil {
		if rerr := t.sampler.UnmarshalBinary(saved); rerr != nil {
			t.broken = fmt.Errorf("train: %w: step %d: %v; restoring the sampler failed: %v", ErrBroken, sm.Step, err, rerr)
			return StepMetrics{}, t.broken
		}
		return StepMetrics{}, err
	}
	// From here on the sampler and the noise have advanced: the update
	// and the private features' afterUpdate must succeed, or the trainer
	// is broken.
	if err := t.applyUpdate(sm.Step, sm.BatchSize); err != nil {
		t.broken = fmt.Errorf("train: %w: %w", ErrBroken, err)
		return StepMetrics{}, t.broken
	}
	for _, h := range t.private {
		if err := h.afterUpdate(&sm); err != nil {
			t.broken = fmt.Errorf("train: %w: step %d: %w", ErrBroken, sm.Step, err)
			return StepMetrics{}, t.broken
		}
	}
	sm.Epsilon, sm.NotPrivate = eps, stepNotPrivate()
	sm.StepSeconds = time.Since(start).Seconds()
	for _, h := range t.hooks {
		if err := h.AfterStep(ctx, t, sm); err != nil {
			return sm, err
		}
	}
	return sm, nil
}

// applyUpdate adds the drawn noise to the clipped sum (the private
// features see the sum before and after it, and scale it), divides by the
// batch size and steps the optimizer (which leaves the parameters
// untouched when it refuses the gradient).
func (t *Trainer) applyUpdate(step, batch int) error {
	div := float64(max(batch, 1))
	if t.plan != nil {
		for _, h := range t.private {
			if err := h.beforeNoise(step, t.sum); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		std := float32(t.plan.NoiseStd * t.noiseScale())
		for i, w := range t.noiseBuf {
			t.sum[i] += std * w
		}
		for _, h := range t.private {
			if err := h.afterNoise(step, t.sum); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		// Dividing by the realized batch size would leak it: the expected
		// size is data independent (SPEC 7).
		div = t.sampler.ExpectedBatch()
	}
	inv := float32(1 / div)
	for i := range t.sum {
		t.sum[i] *= inv
	}
	if i := nonFinite(t.sum); i >= 0 {
		return fmt.Errorf("step %d: non-finite update at coordinate %d (learning rate or clip norm too large?)", step, i)
	}
	if err := t.opt.Step(t.engine.Params(), t.sum); err != nil {
		return fmt.Errorf("step %d: optimizer: %w", step, err)
	}
	return nil
}

// Evaluate measures test loss and accuracy and the epsilon spent so far.
// Without a test set it measures the training set, says so (Split), and
// marks the result as outside the guarantee.
func (t *Trainer) Evaluate() (EvalMetrics, error) {
	return t.EvaluateContext(context.Background())
}

// EvaluateContext is Evaluate, stopping between batches when ctx is done
// (it then returns ctx's error and records nothing). With a parameter
// average (Optimizer.EMA) it evaluates the average.
func (t *Trainer) EvaluateContext(ctx context.Context) (EvalMetrics, error) {
	ds := t.cfg.Data.Test
	em := EvalMetrics{Step: t.Step(), Split: SplitTest}
	if t.cfg.Data.Validation {
		em.Split, em.NotPrivate = SplitValidation, evalValidationNotPrivate()
	}
	if ds == nil {
		ds = t.cfg.Data.Train
		em.Split, em.NotPrivate = SplitTrain, evalTrainNotPrivate()
	}
	// The examples are read where they are, not copied (10,000 test
	// examples of scattering features are 159 MB).
	var err error
	t.ema.swap(t.engine.Params())
	em.Loss, em.Accuracy, err = t.engine.EvaluateContext(ctx, ds.X, ds.Y)
	t.ema.swap(t.engine.Params())
	if err != nil {
		if ctx.Err() != nil {
			return em, ctx.Err()
		}
		return em, fmt.Errorf("train: evaluation: %w", err)
	}
	if t.plan != nil {
		if t.eps, err = t.plan.EpsilonAfter(t.Step()); err != nil {
			return em, fmt.Errorf("train: accounting: %w", err)
		}
		em.Epsilon, em.Delta = t.eps, t.plan.Delta
	}
	if t.metrics != nil {
		t.metrics.write("eval", em)
	}
	if t.cfg.Output.OnEval != nil {
		t.cfg.Output.OnEval(em)
	}
	return em, nil
}

// Close flushes and closes the metrics file.
func (t *Trainer) Close() error {
	if t.metrics != nil {
		return t.metrics.close()
	}
	return nil
}
