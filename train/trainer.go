package train

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/optim"
	"github.com/dpmf-go/dpmf/sampler"
)

// stepNotPrivate lists the keys of a step's metrics that are computed from
// the private batch without noise.
func stepNotPrivate() []string {
	return []string{"loss", "batch_size", "clipped_frac", "norm_quantiles", "non_finite"}
}

// StepMetrics describes one training step.
type StepMetrics struct {
	Step          int        `json:"step"`
	Loss          float64    `json:"loss"`
	BatchSize     int        `json:"batch_size"`
	ClippedFrac   float64    `json:"clipped_frac"`
	NormQuantiles [4]float64 `json:"norm_quantiles"` // 50%, 90%, 99%, max
	NonFinite     int        `json:"non_finite"`
	// Epsilon bounds the epsilon spent after this step (Plan.EpsilonSpent):
	// never below it, exact at the end.
	Epsilon     float64 `json:"epsilon"`
	StepSeconds float64 `json:"step_seconds"`
	// ClipNorm is the step's clip norm under adaptive clipping (a function
	// of released counts), else 0.
	ClipNorm float64 `json:"clip_norm,omitempty"`
	// NotPrivate lists the keys computed from the private batch without
	// noise, which the guarantee does not cover: loss, batch_size,
	// clipped_frac, norm_quantiles and non_finite. Keep them as private as
	// the training data (or drop them) before releasing a run's metrics.
	NotPrivate []string `json:"not_private"`
}

// EvalMetrics describes one evaluation: on the test set, or on the
// training set when the run has none.
type EvalMetrics struct {
	Step int `json:"step"`
	// Split is SplitTest, SplitValidation or SplitTrain. A training-set
	// evaluation is written with the keys train_loss and train_accuracy
	// (never test_*) and lists them under not_private: it reads the
	// private data without noise, outside the guarantee. A validation
	// evaluation (examples held out of the private training data) lists
	// its test_loss and test_accuracy there too.
	Split    string  `json:"split"`
	Loss     float64 `json:"test_loss"`
	Accuracy float64 `json:"test_accuracy"`
	Epsilon  float64 `json:"epsilon"`
	Delta    float64 `json:"delta"`
	// NotPrivate lists the keys the guarantee does not cover.
	NotPrivate []string `json:"not_private,omitempty"`
}

// Evaluation splits. SplitValidation is a test set held out of the
// training data (Config.Validation); it is written with the test_* keys.
const (
	SplitTest       = "test"
	SplitTrain      = "train"
	SplitValidation = "validation"
)

// MarshalJSON names loss and accuracy after the split they were measured
// on: test_loss and test_accuracy, or train_loss and train_accuracy.
func (em EvalMetrics) MarshalJSON() ([]byte, error) {
	type plain EvalMetrics
	if em.Split != SplitTrain {
		return json.Marshal(plain(em))
	}
	return json.Marshal(struct {
		Step       int      `json:"step"`
		Split      string   `json:"split"`
		Loss       float64  `json:"train_loss"`
		Accuracy   float64  `json:"train_accuracy"`
		Epsilon    float64  `json:"epsilon"`
		Delta      float64  `json:"delta"`
		NotPrivate []string `json:"not_private"`
	}{em.Step, em.Split, em.Loss, em.Accuracy, em.Epsilon, em.Delta, em.NotPrivate})
}

// evalTrainNotPrivate lists the keys of a training-set evaluation.
func evalTrainNotPrivate() []string { return []string{"train_loss", "train_accuracy"} }

// evalValidationNotPrivate lists the keys of a validation evaluation: a
// split held out of the private training data is private data too.
func evalValidationNotPrivate() []string { return []string{"test_loss", "test_accuracy"} }

// Trainer runs a configured training loop one step at a time, for services
// that drive training themselves. Build it with New.
type Trainer struct {
	cfg     Config
	plan    *Plan // nil for a non-private run
	model   models.Model
	backend Backend // cfg.Backend (then model is nil), or model on the nn executor
	engine  Engine
	sampler sampler.Sampler
	noise   noise.Source
	opt     optim.Optimizer
	eps     float64 // epsilon after the last evaluated step
	// broken is set when a step failed after its noise was drawn (see
	// ErrBroken); every later step returns it.
	broken error

	idx        []int
	xb         []float32
	yb         []int
	sum, chunk []float32
	noiseBuf   []float32
	augment    data.Augmenter
	ema        *average // nil without Config.EMA
	metrics    *metricsWriter
	audit      *auditHook // nil except under Audit (audit.go)
	users      *userLevel // nil except at user level (users.go)
	exIdx      []int      // a user-level step's examples
	settings   []setting  // the configuration as given, recorded in checkpoints
	// seedFP, dataSalt and dataDigest are recorded in checkpoints too
	// (resumecheck.go).
	seedFP, dataSalt, dataDigest []byte

	// pieces: an engine batch (engineBatch examples at most) larger
	// than len(yb) is gathered in physical pieces (physical.go).
	pieces      bool
	engineBatch int
	features    []FeaturesDone // how the features were got (Result.Features)

	// Issue 27: augmentation multiplicity's groups (augmult.go), and
	// adaptive clipping (adaptive.go; nil without Config.AdaptiveClip).
	groups   []int
	adaptive *adaptiveClip
}

// New checks the configuration, builds the privacy plan (refusing any
// combination whose guarantee does not hold), the model, the clipping
// engine, the sampler, the noise source and the optimizer. If
// cfg.CheckpointPath names an existing checkpoint, the run resumes from it.
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
	t.seedFP = seedFingerprint(cfg.Seed)
	switch {
	case cfg.CheckpointPath != "":
		// A resume with other settings is refused before the plan (and
		// its factorization, minutes for long runs) is built.
		if err := t.checkResume(cfg.CheckpointPath, &cfg); err != nil {
			return nil, err
		}
	case cfg.Features != FeaturesPixels:
		// Recorded now, for a checkpoint saved by SaveCheckpoint: the
		// training data are replaced by their features below.
		t.recordData(cfg.Train)
	}
	// The features (a minute or more for 60,000 images, unless cached)
	// after every cheap refusal.
	if t.features, err = applyFeatures(ctx, &cfg); err != nil {
		return nil, err
	}
	t.cfg = cfg
	if err := t.checkData(&cfg); err != nil {
		return nil, err
	}
	if err := t.newOptimizer(&cfg, d); err != nil {
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
	if err := t.resume(&cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// newBackend builds the model (unless cfg.Backend is given) for the shape
// the features will have, and checks it against that shape, before the
// features are computed.
func (t *Trainer) newBackend(cfg *Config) error {
	if t.backend = cfg.Backend; t.backend == nil {
		var err error
		if t.model, err = buildModel(cfg); err != nil {
			return err
		}
		t.backend = nnBackend{t.model}
	}
	if fshape, err := featureShape(cfg); err != nil {
		return err
	} else if t.backend.InputShape() != fshape {
		return invalidf("data shape %v (features %q) does not match model input %v", fshape, cfg.Features, t.backend.InputShape())
	}
	if c, ok := t.backend.(interface{ Classes() int }); ok && cfg.Train != nil && c.Classes() != cfg.Train.Classes {
		return invalidf("model %s has %d logits, the training data %d classes: give the model one logit per class", t.backend.Name(), c.Classes(), cfg.Train.Classes)
	}
	return nil
}

// newEngine builds the clipping engine, which checks the per-layer bounds
// against the model's layers (before the plan is built), and returns the
// largest batch of examples it takes.
func (t *Trainer) newEngine(cfg *Config) (maxBatch int, err error) {
	maxBatch = cfg.Batch
	if cfg.UserLevel {
		// Batch counts users: a chunk holds up to Batch users' k examples
		// (at least one user's k, at most 4096 examples beyond that).
		maxBatch = max(cfg.Batch, cfg.UserExamples, min(cfg.Batch*cfg.UserExamples, 4096))
	}
	maxBatch = max(maxBatch, cfg.multiplicity())
	t.engine, err = t.backend.NewEngine(clip.Options{Norm: cfg.ClipNorm, PerLayer: cfg.ClipPerLayer, NonPrivate: cfg.NonPrivate, MaxBatch: maxBatch})
	if err != nil {
		return 0, fmt.Errorf("train: %w", err)
	}
	if _, ok := t.engine.(UserEngine); !ok && cfg.multiplicity() > 1 {
		return 0, invalidf("augment multiplicity %d needs an engine that averages an example's copies before clipping (UserEngine); the %s backend's does not", cfg.multiplicity(), t.backend.Name())
	}
	if cfg.UserLevel && cfg.UserExamples > 1 {
		if _, ok := t.engine.(UserEngine); !ok {
			return 0, invalidf("user level with %d examples a user needs an engine that combines a user's examples before clipping (UserEngine); the %s backend's does not: use 1 example a user", cfg.UserExamples, t.backend.Name())
		}
	}
	// The engine's limit on one user's examples, checked now rather than
	// at the step that samples a user that large.
	if uc, ok := t.engine.(interface{ MaxUserExamples() int }); ok {
		k := cfg.multiplicity()
		if cfg.UserLevel {
			k = cfg.UserExamples
		}
		if k > 1 && k > uc.MaxUserExamples() {
			return 0, invalidf("%d examples a user (or copies an example) need more than 1 GiB of per-example gradients for this model of %d parameters: use at most %d", k, len(t.engine.Params()), uc.MaxUserExamples())
		}
	}
	return maxBatch, nil
}

// checkClipPerLayer refuses, as newEngine would, per-layer clip bounds
// whose count is not the model's layers with parameters: it builds the
// model and a one-example engine (Check). A Config.Backend's engine is
// left to New.
func (c *Config) checkClipPerLayer() error {
	if len(c.ClipPerLayer) == 0 || c.NonPrivate || c.Backend != nil {
		return nil
	}
	m, err := buildModel(c)
	if err != nil {
		return err
	}
	if _, err := clip.New(m, clip.Options{Norm: c.ClipNorm, PerLayer: c.ClipPerLayer, MaxBatch: 1}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// checkData checks the shapes of the (featurized) training and test data
// against the model's input.
func (t *Trainer) checkData(cfg *Config) error {
	if shapeOf(cfg.Train) != t.backend.InputShape() {
		return invalidf("data shape %v does not match model input %v", shapeOf(cfg.Train), t.backend.InputShape())
	}
	if cfg.Test != nil && shapeOf(cfg.Test) != t.backend.InputShape() {
		return invalidf("test data shape %v does not match model input %v", shapeOf(cfg.Test), t.backend.InputShape())
	}
	// Whatever the engine would refuse in an example (an embedding id out
	// of range) is refused now for the whole set: a step that failed on
	// the example it sampled would reveal that it was sampled (docs/math.md,
	// no data-dependent control flow).
	if ic, ok := t.engine.(inputChecker); ok {
		if err := ic.CheckInputs(cfg.Train.X); err != nil {
			return invalidf("training data: %v", err)
		}
		if cfg.Test != nil {
			if err := ic.CheckInputs(cfg.Test.X); err != nil {
				return invalidf("test data: %v", err)
			}
		}
	}
	return nil
}

// inputChecker is an engine that checks a whole data set's inputs before
// the run (clip.Engine.CheckInputs).
type inputChecker interface {
	CheckInputs(x []float32) error
}

var _ inputChecker = (*clip.Engine)(nil)

// newOptimizer builds SGD or momentum on the cooldown schedule.
func (t *Trainer) newOptimizer(cfg *Config, d int) error {
	sched := dpcore.CooldownSchedule(cfg.Steps, cfg.CooldownFrac, 0.05)
	sched.Base = cfg.LearningRate
	var err error
	switch {
	case cfg.Optimizer == OptimizerAdam:
		t.opt, err = optim.NewAdam(d, sched, cfg.Steps, optim.AdamOptions{})
	case cfg.Momentum > 0:
		t.opt, err = optim.NewMomentum(d, cfg.Momentum, sched, cfg.Steps, optim.MomentumOptions{})
	default:
		t.opt, err = optim.NewSGD(d, sched, cfg.Steps)
	}
	if err != nil {
		return fmt.Errorf("train: optimizer: %w", err)
	}
	return nil
}

// newSampling builds the users of user-level training, then the sampler:
// a fixed order without privacy, else the privacy plan's sampler with its
// noise source and adaptive clipping.
func (t *Trainer) newSampling(ctx context.Context, cfg *Config, d int) error {
	var err error
	if cfg.UserLevel {
		if t.users, err = newUserLevel(cfg); err != nil {
			return err
		}
		if cfg.Batch > t.users.users.Len() {
			return invalidf("batch = %d users must lie in [1, %d users]", cfg.Batch, t.users.users.Len())
		}
	}
	if cfg.NonPrivate {
		t.sampler, err = sampler.NewFixedOrder(cfg.Train.Len(), cfg.Batch, cfg.Steps, sampler.Options{Seed: deriveSeed(cfg.Seed, "sampler")})
		if err != nil {
			return fmt.Errorf("train: sampler: %w", err)
		}
		return nil
	}
	w, err := t.opt.Workload(cfg.Steps)
	if errors.Is(err, optim.ErrNonlinear) {
		// Adam post-processes the privatized gradients: the mechanism
		// is factorized for their prefix sums.
		w, err = dpcore.PrefixSum(cfg.Steps)
	}
	if err != nil {
		return fmt.Errorf("train: optimizer workload: %w", err)
	}
	t.plan, t.sampler, err = buildPlan(ctx, cfg, w, t.users)
	if err != nil {
		return err
	}
	nopt := noise.Options{Seed: deriveSeed(cfg.Seed, "noise"), MemoryBudget: cfg.NoiseMemoryBudget}
	t.noise, err = t.plan.NoiseSource(d, nopt)
	if err != nil {
		return fmt.Errorf("train: noise source: %w", err)
	}
	if t.adaptive, err = newAdaptiveClip(cfg, t.plan, t.engine, t.sampler.ExpectedBatch()); err != nil {
		return err
	}
	return nil
}

// allocate makes the step's buffers, the parameter average and the
// augmenter.
func (t *Trainer) allocate(cfg *Config, maxBatch, d int) error {
	shape := t.backend.InputShape()
	per := shape[0] * shape[1] * shape[2]
	t.xb = make([]float32, maxBatch*per)
	t.yb = make([]int, maxBatch)
	t.sum = make([]float32, d)
	t.chunk = make([]float32, d)
	if t.noise != nil {
		t.noiseBuf = make([]float32, d)
	}
	if cfg.EMA > 0 {
		t.ema = newAverage(cfg.EMA, t.engine.Params())
	}
	if cfg.Augment {
		as, err := seed64(cfg.Seed, "augment")
		if err != nil {
			return err
		}
		t.augment = data.Augmenter{Seed: as, Pad: 4, Flip: true}
	}
	return nil
}

// resume loads the checkpoint, if there is one, and opens the metrics log
// (appending after a resume).
func (t *Trainer) resume(cfg *Config) error {
	if cfg.CheckpointPath != "" {
		err := t.loadCheckpoint(cfg.CheckpointPath)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if cfg.MetricsPath != "" {
		var err error
		if t.metrics, err = openMetrics(cfg.MetricsPath, t.Step() > 0, cfg.slowWrite/4); err != nil {
			return err
		}
	}
	return nil
}

// maxEmbeddingDim bounds Config.EmbeddingDim.
const maxEmbeddingDim = 4096

func buildModel(cfg *Config) (models.Model, error) {
	if cfg.Model != nil {
		return cfg.Model, nil
	}
	seed, err := seed64(cfg.Seed, "model")
	if err != nil {
		return nil, err
	}
	var shape [3]int
	if shape, err = featureShape(cfg); err != nil {
		return nil, err
	}
	if cfg.ModelName == "scatternet" && cfg.Features != FeaturesScatter {
		return nil, invalidf("model scatternet reads scattering features, not %q", cfg.Features)
	}
	m, err := cfg.namedModel().Build(shape, cfg.Train.Classes, seed)
	if err != nil {
		return nil, fmt.Errorf("train: model: %w", err)
	}
	return m, nil
}

// seed64 derives a 64-bit seed for label from the run's seed, or draws one
// from crypto/rand when the run has none.
func seed64(master []byte, label string) (uint64, error) {
	if s := deriveSeed(master, label); s != nil {
		return binary.LittleEndian.Uint64(s[:]), nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("train: seeding %s: %w", label, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Plan is the run's privacy plan (nil for a non-private run).
func (t *Trainer) Plan() *Plan { return t.plan }

// Model is the model being trained; nil when Config.Backend is set.
func (t *Trainer) Model() models.Model { return t.model }

// Engine is the engine computing the run's clipped gradient sums.
func (t *Trainer) Engine() Engine { return t.engine }

// Step is the number of steps done.
func (t *Trainer) Step() int { return t.sampler.Step() }

// Done reports whether all steps ran.
func (t *Trainer) Done() bool { return t.Step() >= t.cfg.Steps }

// ErrBroken is wrapped by every call on a Trainer whose last step failed
// after its noise was drawn: sampler and noise advanced but the model did
// not, so the trainer refuses to go on until it is rebuilt (New) from a
// checkpoint. Only an arithmetic overflow in the noisy sum can cause it;
// every earlier failure (data, clipping, context) rolls the step back.
var ErrBroken = errors.New("trainer broken by a failed step")

// TrainStep runs one step: sample, clipped sum, noise, divide by the
// expected batch size, optimizer update. A step is all-or-nothing: on an
// error before the update the sampler is restored, so the next call draws
// the same batch and pairs it with the same noise row; the sampler, the
// noise source, the model and the optimizer advance together or not at all.
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
	// must be applied, or the trainer is broken.
	if err := t.applyUpdate(sm.Step, sm.BatchSize); err != nil {
		t.broken = fmt.Errorf("train: %w: %w", ErrBroken, err)
		return StepMetrics{}, t.broken
	}
	sm.ClipNorm = t.adaptive.norm()
	if err := t.adaptive.update(sm.BatchSize); err != nil {
		t.broken = fmt.Errorf("train: %w: step %d: %w", ErrBroken, sm.Step, err)
		return StepMetrics{}, t.broken
	}
	sm.Epsilon, sm.NotPrivate = eps, stepNotPrivate()
	sm.StepSeconds = time.Since(start).Seconds()
	if t.metrics != nil {
		t.metrics.write("step", sm)
	}
	if t.cfg.OnStep != nil {
		t.cfg.OnStep(sm)
	}
	return sm, nil
}

// sampleAndClip draws the next batch and leaves its clipped gradient sum in
// t.sum. It changes no state but the sampler's.
func (t *Trainer) sampleAndClip(ctx context.Context) (StepMetrics, error) {
	var err error
	step := t.sampler.Step() + 1
	t.idx, err = t.sampler.Next(t.idx)
	if err != nil {
		return StepMetrics{Step: step}, fmt.Errorf("train: step %d: %w", step, err)
	}
	t.idx = t.audit.split(t.idx)
	for i := range t.sum {
		t.sum[i] = 0
	}
	sm := StepMetrics{Step: step, BatchSize: len(t.idx)}
	t.adaptive.begin()
	if t.users != nil {
		if err := t.clipUsers(ctx, step, &sm); err != nil {
			return sm, fmt.Errorf("train: step %d: %w", step, err)
		}
		return sm, checkClippedSum(step, t.sum)
	}
	if ie, ok := t.engine.(IndexEngine); ok {
		return t.clipByIndex(ctx, ie, step, sm)
	}
	// A Poisson batch can exceed the engine's batch: the clipped sum is
	// additive, so larger batches run in chunks (each gathered in
	// physical pieces when the engine takes them: physical.go).
	maxBatch := t.chunkExamples()
	if t.pieces {
		maxBatch = t.engineBatch
	}
	var tl clip.Tally
	for lo := 0; lo < len(t.idx); lo += maxBatch {
		if err := ctx.Err(); err != nil {
			return sm, err
		}
		hi := min(lo+maxBatch, len(t.idx))
		st, err := t.clipChunk(ctx, t.idx[lo:hi], step)
		if err != nil {
			if ctx.Err() != nil {
				return sm, ctx.Err()
			}
			return sm, fmt.Errorf("train: step %d: %w", step, err)
		}
		t.adaptive.observe(st)
		for i, v := range t.chunk {
			t.sum[i] += v
		}
		tl.Add(st, hi-lo, hi-lo)
	}
	st := tl.Stats()
	sm.Loss, sm.ClippedFrac, sm.NonFinite, sm.NormQuantiles = st.Loss, st.Clipped, st.NonFinite, st.NormQuantiles
	return sm, checkClippedSum(step, t.sum)
}

// checkClippedSum refuses a clipped sum that is not finite. No data can
// make one: every engine scales each unit into the clip norm and drops a
// non-finite unit (docs/math.md, no data-dependent control flow), and the
// clip norm times the examples stays far inside the float32 range
// (maxClippedSum). An error here is an engine's defect; the step is not
// applied.
func checkClippedSum(step int, sum []float32) error {
	if i := nonFinite(sum); i >= 0 {
		return fmt.Errorf("train: step %d: non-finite clipped gradient sum at coordinate %d: the engine let a unit's data through unclipped (a defect; the step was not applied)", step, i)
	}
	return nil
}

// applyUpdate adds the drawn noise to the clipped sum, divides by the batch
// size and steps the optimizer (which leaves the parameters untouched when
// it refuses the gradient).
func (t *Trainer) applyUpdate(step, batch int) error {
	div := float64(max(batch, 1))
	if t.plan != nil {
		if err := t.audit.beforeNoise(step, t.sum); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		std := float32(t.plan.NoiseStd * t.audit.noiseScale() * t.adaptive.scale())
		for i, w := range t.noiseBuf {
			t.sum[i] += std * w
		}
		if err := t.audit.released(step, t.sum); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
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
	t.ema.update(t.engine.Params())
	return nil
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

func (t *Trainer) gather(idx []int, step int) ([]float32, []int, error) {
	per := t.cfg.Train.Shape.Size()
	x, y := t.xb[:len(idx)*per], t.yb[:len(idx)]
	var err error
	if t.cfg.Augment {
		err = t.augment.Batch(t.cfg.Train, idx, uint64(step), x, y)
	} else {
		err = t.cfg.Train.Batch(idx, x, y)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("gathering batch: %w", err)
	}
	return x, y, nil
}

func shapeOf(d *data.Dataset) [3]int { return [3]int{d.Shape.C, d.Shape.H, d.Shape.W} }

// Evaluate measures test loss and accuracy and the epsilon spent so far.
// Without a test set it measures the training set, says so (Split), and
// marks the result as outside the guarantee.
func (t *Trainer) Evaluate() (EvalMetrics, error) {
	return t.EvaluateContext(context.Background())
}

// EvaluateContext is Evaluate, stopping between batches when ctx is done
// (it then returns ctx's error and records nothing).
func (t *Trainer) EvaluateContext(ctx context.Context) (EvalMetrics, error) {
	ds := t.cfg.Test
	em := EvalMetrics{Step: t.Step(), Split: SplitTest}
	if t.cfg.Validation {
		em.Split, em.NotPrivate = SplitValidation, evalValidationNotPrivate()
	}
	if ds == nil {
		ds = t.cfg.Train
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
	if t.cfg.OnEval != nil {
		t.cfg.OnEval(em)
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

// Result summarizes a finished run.
type Result struct {
	Plan     *Plan         `json:"plan,omitempty"`
	Steps    int           `json:"steps"`
	Final    EvalMetrics   `json:"final"`
	Evals    []EvalMetrics `json:"evals"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Resumed  int           `json:"resumed_from_step,omitempty"`
	Model    string        `json:"model"`
	Examples int           `json:"examples"`
	// Users is the number of users of a user-level run (0 otherwise).
	Users int `json:"users,omitempty"`
	// Features says, per data set, whether its features (Config.Features)
	// were computed or read from the cache, and in how long (none without
	// features).
	Features []FeaturesDone `json:"features,omitempty"`
}

// Run trains to the end (resuming from cfg.CheckpointPath when a checkpoint
// is there), evaluating every cfg.EvalEvery steps and at the end, and
// checkpointing every cfg.CheckpointEvery steps.
//
// Every output path is checked before the plan is built. On resume the
// metrics file is truncated back to the checkpoint's step and the
// evaluations recorded before it are kept in the Result. When ctx is
// cancelled (SIGINT, SIGTERM) Run finishes the step under way, saves a
// checkpoint and returns an error wrapping ErrInterrupted that says from
// which step the run resumes.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	if err := checkOutputs(&cfg); err != nil {
		return nil, err
	}
	t, err := New(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("train: %w before the first step (while building the plan; nothing to save): %w", ErrInterrupted, ctx.Err())
		}
		return nil, err
	}
	defer t.Close()
	cfg = t.cfg
	res := &Result{Plan: t.plan, Resumed: t.Step(), Model: t.backend.Name(), Examples: cfg.Train.Len(), Features: t.features}
	if t.users != nil {
		res.Users = t.users.users.Len()
	}
	if cfg.Log != nil && t.plan != nil {
		fmt.Fprintln(cfg.Log, t.plan)
	}
	if why := slowPath(t.backend); cfg.Log != nil && why != "" {
		fmt.Fprintln(cfg.Log, why)
	}
	if res.Resumed > 0 {
		if err := resumeLog(t, res); err != nil {
			return res, err
		}
	}
	for !t.Done() {
		if ctx.Err() != nil {
			return res, t.interrupted(ctx)
		}
		sm, err := t.TrainStep(ctx)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return res, t.interrupted(ctx)
			}
			return res, err
		}
		if sm.Step%cfg.EvalEvery == 0 && sm.Step < cfg.Steps {
			em, err := t.EvaluateContext(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return res, t.interrupted(ctx)
				}
				return res, err
			}
			res.Evals = append(res.Evals, em)
		}
		if cfg.CheckpointPath != "" && cfg.CheckpointEvery > 0 && sm.Step%cfg.CheckpointEvery == 0 {
			if err := t.checkpoint(); err != nil {
				return res, err
			}
		}
	}
	em, err := t.EvaluateContext(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return res, t.interrupted(ctx)
		}
		return res, err
	}
	res.Evals = append(res.Evals, em)
	res.Final, res.Steps, res.Elapsed = em, t.Step(), time.Since(start)
	if cfg.CheckpointPath != "" {
		if err := t.checkpoint(); err != nil {
			return res, err
		}
	}
	// The model leaves Run holding what was evaluated: the average.
	t.ema.install(t.engine.Params())
	return res, nil
}
