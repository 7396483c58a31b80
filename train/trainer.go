package train

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/clip"
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
	seeds                        runSeeds
	// resumeFrom is the checkpoint checkResume read, until New restores
	// it.
	resumeFrom *checkpointState
	features   []FeaturesDone // how the features were got (Result.Features)
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
	var err error
	if t.seeds, err = newRunSeeds(cfg.Privacy.Seed); err != nil {
		return nil, err
	}
	if err := t.newBackend(&cfg); err != nil {
		return nil, err
	}
	maxBatch, err := t.newEngine(&cfg)
	if err != nil {
		return nil, err
	}
	d := len(t.engine.Params())
	t.settings = cfg.settings(sized{t.backend.Name(), d})
	t.seedFP = t.seeds.fingerprint
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

// attach adds a private feature's side of the step, when it has one.
func (t *Trainer) attach(h stepHook) {
	if h != nil {
		t.private = append(t.private, h)
	}
}

// noiseScale is the product of the private features' noise scales.
func (t *Trainer) noiseScale() float64 {
	s := 1.0
	for _, h := range t.private {
		s *= h.noiseScale()
	}
	return s
}

// observe hands a clipped sum's statistics to the private features.
func (t *Trainer) observe(st clip.Stats) {
	for _, h := range t.private {
		h.observe(st)
	}
}

// nonFinite is the index of the first NaN or infinity in v, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if x-x != 0 {
			return i
		}
	}
	return -1
}
