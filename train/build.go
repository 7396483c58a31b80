package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/optim"
	"github.com/dpmf-go/dpmf/sampler"
)

// The pieces New builds, in its order.

// newBackend builds the model (unless cfg.Model.Backend is given) for the
// shape the features will have, and checks it against that shape, before
// the features are computed.
func (t *Trainer) newBackend(cfg *Config) error {
	if t.backend = cfg.Model.Backend; t.backend == nil {
		var err error
		if t.model, err = buildModel(cfg, t.seeds.model); err != nil {
			return err
		}
		t.backend = nnBackend{t.model}
	}
	if fshape, err := featureShape(cfg.Data.Train, cfg.Data.Features); err != nil {
		return err
	} else if t.backend.InputShape() != fshape {
		return invalidf("data shape %v (features %q) does not match model input %v", fshape, cfg.Data.Features, t.backend.InputShape())
	}
	if c, ok := t.backend.(interface{ Classes() int }); ok && c.Classes() != cfg.Data.Train.Classes {
		return invalidf("model %s has %d logits, the training data %d classes: give the model one logit per class", t.backend.Name(), c.Classes(), cfg.Data.Train.Classes)
	}
	return nil
}

// newEngine builds the clipping engine, which checks the per-layer bounds
// against the model's layers (before the plan is built), and returns the
// largest batch of examples it takes.
func (t *Trainer) newEngine(cfg *Config) (maxBatch int, err error) {
	batch, ub, k := cfg.Privacy.Batch, cfg.Privacy.UserBound, cfg.Data.Augment.multiplicity()
	maxBatch = batch
	if ub != nil {
		// Batch counts users: a chunk holds up to Batch users' k examples
		// (at least one user's k, at most 4096 examples beyond that).
		maxBatch = max(batch, ub.Examples, min(batch*ub.Examples, 4096))
		k = ub.Examples
	}
	maxBatch = max(maxBatch, k)
	t.engine, err = t.backend.NewEngine(clip.Options{Norm: cfg.Privacy.ClipNorm, PerLayer: cfg.Model.ClipPerLayer, NonPrivate: cfg.NonPrivate, MaxBatch: maxBatch})
	if err != nil {
		return 0, fmt.Errorf("train: %w", err)
	}
	if _, ok := t.engine.(UserEngine); !ok && k > 1 {
		if ub != nil {
			return 0, invalidf("user level with %d examples a user needs an engine that combines a user's examples before clipping (UserEngine); the %s backend's does not: use 1 example a user", k, t.backend.Name())
		}
		return 0, invalidf("augment multiplicity %d needs an engine that averages an example's copies before clipping (UserEngine); the %s backend's does not", k, t.backend.Name())
	}
	// The engine's limit on one user's examples, checked now rather than
	// at the step that samples a user that large.
	if uc, ok := t.engine.(interface{ MaxUserExamples() int }); ok && k > 1 && k > uc.MaxUserExamples() {
		return 0, invalidf("%d examples a user (or copies an example) need more than 1 GiB of per-example gradients for this model of %d parameters: use at most %d", k, len(t.engine.Params()), uc.MaxUserExamples())
	}
	return maxBatch, nil
}

// checkData checks the shapes of the (featurized) training and test data
// against the model's input.
func (t *Trainer) checkData(d *Data) error {
	if shapeOf(d.Train) != t.backend.InputShape() {
		return invalidf("data shape %v does not match model input %v", shapeOf(d.Train), t.backend.InputShape())
	}
	if d.Test != nil && shapeOf(d.Test) != t.backend.InputShape() {
		return invalidf("test data shape %v does not match model input %v", shapeOf(d.Test), t.backend.InputShape())
	}
	// Whatever the engine would refuse in an example (an embedding id out
	// of range) is refused now for the whole set: a step that failed on
	// the example it sampled would reveal that it was sampled (docs/math.md,
	// no data-dependent control flow).
	if ic, ok := t.engine.(inputChecker); ok {
		if err := ic.CheckInputs(d.Train.X); err != nil {
			return invalidf("training data: %v", err)
		}
		if d.Test != nil {
			if err := ic.CheckInputs(d.Test.X); err != nil {
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

// newOptimizer builds SGD, momentum or Adam on the cooldown schedule,
// with the warm-up when set.
func (t *Trainer) newOptimizer(o *Optimizer, steps, d int) error {
	sched := dpcore.CooldownSchedule(steps, o.CooldownFrac, 0.05)
	sched.Base = o.LearningRate
	o.Warmup.apply(&sched)
	var err error
	switch {
	case o.Rule == OptimizerAdam:
		t.opt, err = optim.NewAdam(d, sched, steps, optim.AdamOptions{})
	case o.Momentum > 0:
		t.opt, err = optim.NewMomentum(d, o.Momentum, sched, steps, optim.MomentumOptions{})
	default:
		t.opt, err = optim.NewSGD(d, sched, steps)
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
	if t.users, err = newUserLevel(cfg.Data.Train, cfg.Privacy.UserBound, cfg.Privacy.Batch, t.seeds.users); err != nil {
		return err
	}
	p := &cfg.Privacy
	if cfg.NonPrivate {
		t.sampler, err = sampler.NewFixedOrder(cfg.Data.Train.Len(), p.Batch, p.Steps, sampler.Options{Seed: t.seeds.sampler})
		if err != nil {
			return fmt.Errorf("train: sampler: %w", err)
		}
		return nil
	}
	w, err := t.opt.Workload(p.Steps)
	if errors.Is(err, optim.ErrNonlinear) {
		// Adam post-processes the privatized gradients: the mechanism
		// is factorized for their prefix sums.
		w, err = dpcore.PrefixSum(p.Steps)
	}
	if err != nil {
		return fmt.Errorf("train: optimizer workload: %w", err)
	}
	t.plan, t.sampler, err = buildPlan(ctx, cfg, w, t.users)
	if err != nil {
		return err
	}
	nopt := noise.Options{Seed: t.seeds.noise, MemoryBudget: cfg.Memory.NoiseBudget}
	t.noise, err = t.plan.NoiseSource(d, nopt)
	if err != nil {
		return fmt.Errorf("train: noise source: %w", err)
	}
	adaptive, err := newAdaptiveClip(t.plan, t.engine, t.sampler.ExpectedBatch(), t.seeds.quantile)
	if err != nil {
		return err
	}
	if adaptive != nil {
		t.attach(adaptive)
	}
	return nil
}

// allocate makes the step's buffers and the augmenter, and chooses how a
// step's clipped sum is computed.
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
	if cfg.Data.Augment != nil {
		t.augment = data.Augmenter{Seed: t.seeds.augment, Pad: 4, Flip: true}
	}
	t.clippedSum = t.clipExamples
	if ie, ok := t.engine.(IndexEngine); ok {
		t.clippedSum = func(ctx context.Context, step int, sm *StepMetrics) error { return t.clipByIndex(ctx, ie, step, sm) }
	}
	if t.users != nil {
		t.clippedSum = t.clipUsers
	}
	return nil
}

// attachHooks attaches the non-private hooks: the parameter average, the
// metrics, the caller's.
func (t *Trainer) attachHooks(cfg *Config) {
	if t.ema = cfg.Optimizer.EMA.newAverage(t.engine.Params()); t.ema != nil {
		t.hooks = append(t.hooks, t.ema)
	}
	t.hooks = append(t.hooks, metricsHook{onStep: cfg.Output.OnStep})
	t.hooks = append(t.hooks, cfg.Hooks...)
}

// resume restores the checkpoint checkResume read, if there is one, and opens the metrics log
// (appending after a resume).
func (t *Trainer) resume(cfg *Config) error {
	if ck := t.resumeFrom; ck != nil {
		t.resumeFrom = nil
		if err := t.restore(cfg.Output.CheckpointPath, ck); err != nil {
			return err
		}
	}
	if path := cfg.Output.MetricsPath; path != "" {
		var err error
		if t.metrics, err = openMetrics(path, t.Step() > 0, cfg.Output.slowWrite/4); err != nil {
			return err
		}
		for i, h := range t.hooks {
			if m, ok := h.(metricsHook); ok {
				m.w = t.metrics
				t.hooks[i] = m
			}
		}
	}
	return nil
}

// buildModel builds the model cfg names, initialized from seed.
func buildModel(cfg *Config, seed uint64) (models.Model, error) {
	if cfg.Model.Built != nil {
		return cfg.Model.Built, nil
	}
	var (
		shape [3]int
		err   error
	)
	if shape, err = featureShape(cfg.Data.Train, cfg.Data.Features); err != nil {
		return nil, err
	}
	if cfg.Model.Name == "scatternet" && cfg.Data.Features != FeaturesScatter {
		return nil, invalidf("model scatternet reads scattering features, not %q", cfg.Data.Features)
	}
	m, err := cfg.Model.named().Build(shape, cfg.Data.Train.Classes, seed)
	if err != nil {
		return nil, fmt.Errorf("train: model: %w", err)
	}
	return m, nil
}

// physicalExamples is how many examples are gathered at once (the size
// of the gathering buffer) for an engine taking batches of maxBatch, and
// whether an engine batch larger than that is gathered in pieces.
func (t *Trainer) physicalExamples(cfg *Config, maxBatch int) (int, bool) {
	pe, ok := t.engine.(PhysicalEngine)
	if !ok || cfg.Privacy.UserBound != nil || cfg.Data.Augment.multiplicity() > 1 {
		return maxBatch, false
	}
	want := cfg.Memory.PhysicalBatch
	if want <= 0 {
		want = DefaultPhysicalBatch
	}
	g := pe.Granule()
	p := max(want/g*g, g)
	if p >= maxBatch {
		return maxBatch, false
	}
	return p, true
}

// applyFeatures replaces cfg.Train and cfg.Test by their features. Views
// of one data set (data.Dataset.Slice: -validation's training and held-out
// parts) are served from the features of that data set, computed (or
// read from the cache) once, unless together they cover less than half of
// it. The features are held once, in float32: the views share them.
func applyFeatures(ctx context.Context, cfg *Config) ([]FeaturesDone, error) {
	if cfg.Data.Features != FeaturesScatter {
		return nil, nil
	}
	sc, err := scattering(cfg.Data.Train.Shape)
	if err != nil {
		return nil, err
	}
	fz := newFeaturizer(sc, cfg.Privacy.CacheDir, cfg.Output.OnFeatures)
	if err := fz.apply(ctx, []**data.Dataset{&cfg.Data.Train, &cfg.Data.Test}); err != nil {
		return nil, err
	}
	if cfg.Output.Log != nil {
		fmt.Fprintln(cfg.Output.Log, fz.summary())
	}
	return fz.done, nil
}
