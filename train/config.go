package train

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/privacy"
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("train", format, args...)
}

// ErrInterrupted is wrapped by the error Run returns when its context is
// cancelled (SIGINT, SIGTERM) between steps; the error says whether a
// checkpoint was saved at the interrupt and from which step the run resumes.
var ErrInterrupted = errors.New("interrupted")

// Sampling names how batches are drawn (privacy.Sampling).
type Sampling = privacy.Sampling

// The samplings; see package privacy.
const (
	SamplingAuto        = privacy.SamplingAuto
	SamplingPoisson     = privacy.SamplingPoisson
	SamplingBandPoisson = privacy.SamplingBandPoisson
	SamplingFixedOrder  = privacy.SamplingFixedOrder
	SamplingShuffle     = privacy.SamplingShuffle
	// SamplingRandomAllocation: DP-SGD only (privacy.SamplingRandomAllocation).
	SamplingRandomAllocation = privacy.SamplingRandomAllocation
	// SamplingBandAllocation: banded encoders (privacy.SamplingBandAllocation).
	SamplingBandAllocation = privacy.SamplingBandAllocation
)

// WorkloadChoice says which workload a matrix mechanism is built for.
type WorkloadChoice string

const (
	// WorkloadOptimizer factorizes the optimizer's own momentum/cooldown
	// map ("Optimal M = BC", Denisov et al. Table 1).
	WorkloadOptimizer WorkloadChoice = "optimizer"
	// WorkloadPrefix factorizes prefix sums; the optimizer post-processes.
	WorkloadPrefix WorkloadChoice = "prefix"
)

// OptimizerChoice names the update rule of a run.
type OptimizerChoice string

const (
	// OptimizerSGD is SGD, with heavy-ball momentum when Config.Momentum > 0.
	OptimizerSGD OptimizerChoice = "sgd"
	// OptimizerAdam is Adam (optim.NewAdam, default betas).
	OptimizerAdam OptimizerChoice = "adam"
)

// Config is a whole training run. The zero value is not runnable: Train,
// Model (or ModelName), Steps and Batch are required. See Defaults.
type Config struct {
	// Data.
	Train, Test *data.Dataset `json:"-"`
	// Validation says Test was held out of the training data to choose
	// hyperparameters: evaluations are labelled SplitValidation, and
	// listed as not covered by the guarantee (the held-out examples are
	// private data).
	Validation bool `json:"validation,omitempty"`
	// Augment applies random crop (pad 4) and horizontal flip to training
	// examples, deterministically from the seed, step and example.
	Augment bool `json:"augment"`
	// AugmentMultiplicity is K, the augmented copies of each sampled
	// example whose gradients are averaged before clipping (De et al.
	// 2022; augmult.go); 0 or 1: one copy.
	AugmentMultiplicity int `json:"augment_multiplicity,omitempty"`

	// Features is a fixed per-example transform applied to the training
	// and test examples before the model sees them: FeaturesPixels (none)
	// or FeaturesScatter. The "scatternet" model sets FeaturesScatter.
	Features Features `json:"features,omitempty"`

	// Model: either a built model or a name ("logistic", "mlp", "cnn",
	// "wrn16-4", "tabular", or "scatternet": GroupNorm and a linear layer
	// on scattering features, Tramèr and Boneh 2021).
	Model     models.Model `json:"-"`
	ModelName string       `json:"model"`
	Hidden    []int        `json:"hidden,omitempty"`
	// Categorical are the vocabulary sizes of the categorical columns of a
	// table, its last len(Categorical) features (data.Tabular's
	// Cardinalities), which the "tabular" model embeds.
	Categorical []int `json:"categorical,omitempty"`
	// EmbeddingDim is the dimension in which the "tabular" model embeds
	// each categorical column (0: 8).
	EmbeddingDim int `json:"embedding_dim,omitempty"`
	// Backend, when set, is the model together with the engine that
	// computes its clipped gradient sums (Engine), e.g. a user's gorgonia
	// graph through package gorgoniadp; Model, ModelName and the named
	// models' knobs are then ignored.
	Backend Backend `json:"-"`

	// Schedule.
	Steps int `json:"steps"`
	Batch int `json:"batch"` // expected batch size B (users, at user level)

	// UserLevel makes the unit of privacy one user: all the examples one
	// owner id holds (Train.Owners, see data.Dataset.SetOwners). The
	// sampler draws users (Batch is the expected number of users a step),
	// at most UserExamples examples of a sampled user enter the step
	// (chosen with secret randomness when it has more), and their
	// gradients' sum (or mean, UserMean) is clipped to ClipNorm as one
	// contribution, so one user's whole data moves a step's clipped sum by
	// at most ClipNorm. The claim, the ledger and the model file say
	// "user". Flat clipping only (no ClipPerLayer). A step's metrics
	// then count users: batch_size is the users sampled, clipped_frac and
	// norm_quantiles are over users' combined gradients (loss stays the
	// mean over their examples). With more than one example a user, the
	// per-example gradients are materialized (clip.Engine.UserClippedSum):
	// the same single pass, with memory traffic proportional to the
	// examples times the parameters (BENCHMARKS.md).
	UserLevel bool `json:"user_level,omitempty"`
	// UserExamples is k, the most examples of one user per step (0: 1).
	UserExamples int `json:"user_examples,omitempty"`
	// UserMean clips the mean of a user's per-example gradients instead of
	// their sum.
	UserMean bool `json:"user_mean,omitempty"`

	// Privacy.
	NonPrivate bool `json:"non_private"`
	// Mechanism is the noise mechanism, e.g. mfnoise.BandMF{Bands: 8}
	// (nil: mfnoise.DPSGD{}); a command line parses names with
	// privacy.ParseMechanism.
	Mechanism privacy.Mechanism `json:"-"`
	Workload  WorkloadChoice    `json:"workload"`
	Sampling  Sampling          `json:"sampling"`
	// Bands is the number of partitions of band sampling; 0 means the
	// mechanism's band count.
	Bands int `json:"bands,omitempty"`
	// ClipNorm is zeta.
	ClipNorm float64 `json:"clip_norm"`
	// ClipPerLayer, when set, clips each affine layer's gradient (weight
	// and bias together, in network order) to its own bound, as Opacus
	// and jax_privacy offer. An example's whole gradient then has norm at
	// most the L2 norm of the bounds, which Defaults sets as ClipNorm (the
	// sensitivity the noise is calibrated to), replacing any other value.
	ClipPerLayer []float64 `json:"clip_per_layer,omitempty"`
	// AdaptiveClip, when set, makes ClipNorm the initial clip norm of
	// adaptive clipping (adaptive.go).
	AdaptiveClip *AdaptiveClip `json:"adaptive_clip,omitempty"`
	// NoiseMultiplier sigma; 0 means calibrate it to Epsilon.
	NoiseMultiplier float64 `json:"noise_multiplier,omitempty"`
	Epsilon         float64 `json:"epsilon,omitempty"`
	// Delta; 0 means min(1e-5, 1/m).
	Delta float64 `json:"delta,omitempty"`
	// Accountant: privacy.PLD (default) or privacy.RDP.
	Accountant privacy.AccountantKind `json:"accountant"`

	// Optimizer: heavy-ball momentum (0 = plain SGD) with the learning
	// rate linearly cooled down to 0.05x over the last CooldownFrac of
	// steps.
	LearningRate float64 `json:"learning_rate"`
	Momentum     float64 `json:"momentum"`
	// Optimizer is the update rule: OptimizerSGD ("" too; heavy-ball
	// momentum when Momentum > 0) or OptimizerAdam. Adam is not linear in
	// the gradients: with WorkloadOptimizer a matrix mechanism is then
	// factorized for the prefix sum, and Adam reads the privatized
	// gradients as post-processing; the claim is the same.
	Optimizer    OptimizerChoice `json:"optimizer,omitempty"`
	CooldownFrac float64         `json:"cooldown_frac"`
	// EMA, when positive, is the decay beta of an exponential moving
	// average of the parameters after each update, with the warm-up
	// beta_t = min(EMA, (1+t)/(10+t)) at step t. Evaluations use the
	// average, and the model holds it after Run. It is a function of the
	// released noisy updates only (post-processing): it costs no privacy,
	// and the ledger lists it.
	EMA float64 `json:"ema,omitempty"`

	// Seed makes the run reproducible (sampler, noise, initialization,
	// augmentation). Nil: every generator is seeded from crypto/rand. A
	// seeded private run records that its noise is reproducible from the
	// seed, and a seed of fewer than 128 bits (privacy.SeedBits) is
	// refused unless InsecureSeed is set.
	Seed []byte `json:"-"`
	// InsecureSeed accepts a low-entropy Seed for a private run: an
	// insecure experiment, recorded as such in the plan and the ledger.
	InsecureSeed bool `json:"insecure_seed,omitempty"`
	// NoiseMemoryBudget bounds the noise source's state in bytes (0: none).
	NoiseMemoryBudget int64 `json:"noise_memory_budget,omitempty"`

	// Bookkeeping.
	EvalEvery       int    `json:"eval_every"`
	CheckpointPath  string `json:"checkpoint,omitempty"`
	CheckpointEvery int    `json:"checkpoint_every,omitempty"`
	MetricsPath     string `json:"metrics,omitempty"`
	// CacheDir stores optimized factorizations so they are built once.
	CacheDir string `json:"cache_dir,omitempty"`
	// OnStep and OnEval are called after each step and evaluation.
	OnStep func(StepMetrics) `json:"-"`
	OnEval func(EvalMetrics) `json:"-"`
	// PhysicalBatch bounds the examples gathered at once (0:
	// DefaultPhysicalBatch): a larger batch runs in pieces whose clipped
	// sum the engine (a PhysicalEngine, such as the planned executor)
	// accumulates exactly as for the whole batch, so it changes the
	// memory a step takes, never the result.
	PhysicalBatch int `json:"-"`
	// OnFeatures is called while the features of Config.Features are
	// computed (not when they are read from the cache), after every block
	// of examples.
	OnFeatures func(FeaturesProgress) `json:"-"`
	// Log receives human-readable plan and summary lines (nil: none).
	Log io.Writer `json:"-"`

	// slowWrite, set only by this package's crash tests, pauses every
	// checkpoint write before its rename, and every metrics record (a
	// quarter of it) halfway, so that kills land inside those writes.
	slowWrite time.Duration
}

// Defaults fills unset knobs: clip norm 1, PLD accounting, learning rate
// 0.5 for plain SGD and 0.1 with momentum, the mechanism's workload taken
// from the optimizer, and an evaluation every fifth of the run.
func (c *Config) Defaults() {
	if c.Mechanism == nil && !c.NonPrivate {
		c.Mechanism = privacy.DefaultMechanism()
	}
	if c.ClipNorm == 0 {
		c.ClipNorm = 1
	}
	if c.Accountant == "" {
		c.Accountant = privacy.PLD
	}
	if c.LearningRate == 0 {
		// Heavy-ball momentum beta multiplies the effective step by
		// 1/(1-beta) (20 at 0.95); 0.1 keeps the papers' momentum stable
		// where 0.5 diverges on the CNN (measured, BENCHMARKS.md).
		c.LearningRate = 0.5
		if c.Momentum > 0 {
			c.LearningRate = 0.1
		}
		if c.Optimizer == OptimizerAdam {
			c.LearningRate = 0.001 // Kingma and Ba's default
		}
	}
	if c.Workload == "" {
		c.Workload = WorkloadOptimizer
	}
	if c.EvalEvery == 0 {
		c.EvalEvery = max(1, c.Steps/5)
	}
	if c.ModelName == "" && c.Model == nil && c.Backend == nil {
		c.ModelName = "mlp"
	}
	if c.ModelName == "scatternet" && c.Model == nil && c.Features == FeaturesPixels {
		c.Features = FeaturesScatter
	}
	if c.UserLevel && c.UserExamples == 0 {
		c.UserExamples = 1
	}
	if len(c.ClipPerLayer) > 0 {
		sq := 0.0
		for _, v := range c.ClipPerLayer {
			sq += v * v
		}
		c.ClipNorm = math.Sqrt(sq)
	}
}

func (c *Config) validate() error {
	bad := invalidf
	if c.Train == nil || c.Train.Len() == 0 {
		return bad("no training data")
	}
	if c.Steps <= 0 {
		return bad("steps = %d must be positive", c.Steps)
	}
	if c.PhysicalBatch < 0 {
		return bad("physical batch %d must be positive (0: %d)", c.PhysicalBatch, DefaultPhysicalBatch)
	}
	if c.UserLevel || c.UserExamples != 0 || c.UserMean {
		switch {
		case !c.UserLevel:
			return bad("user examples %d and user mean %v apply to user-level runs only", c.UserExamples, c.UserMean)
		case c.NonPrivate:
			return bad("user level is a unit of privacy: a non-private run has none")
		case c.Train.Owners == nil:
			return bad("user level: the training data %q has no owner ids (a CSV user column, data.Dataset.SetOwners or a synthetic assignment)", c.Train.Name)
		case c.UserExamples < 1 || c.UserExamples > maxUserExamples:
			return bad("user examples %d: want 1 to %d examples per user per step", c.UserExamples, maxUserExamples)
		case len(c.ClipPerLayer) > 0:
			return bad("user level clips each user's gradient as a whole: per-layer clipping is not supported")
		case c.Batch <= 0:
			return bad("batch = %d users must be positive", c.Batch)
		}
		return c.validateRest()
	}
	if c.Batch <= 0 || c.Batch > c.Train.Len() {
		return bad("batch = %d must lie in [1, %d examples]", c.Batch, c.Train.Len())
	}
	return c.validateRest()
}

// maxUserExamples bounds Config.UserExamples.
const maxUserExamples = 1 << 16

// maxClippedSum bounds the clip norm times the training examples: a
// step's clipped sum then stays far inside the float32 range (3.4e38),
// with room for the noise.
const maxClippedSum = 1e30

func (c *Config) validateRest() error {
	if err := c.checkSizes(); err != nil {
		return err
	}
	if err := c.checkSettings(); err != nil {
		return err
	}
	if c.NonPrivate {
		return nil
	}
	if m := c.Train.Len() / c.Batch; c.Bands > m {
		return invalidf("bands = %d: band sampling needs at least a batch in each partition, so at most examples/batch = %d/%d = %d bands", c.Bands, c.Train.Len(), c.Batch, m)
	}
	return nil
}

// Check refuses, with the error New would give, a configuration New
// refuses before building anything: CheckSettings, the checks against
// the data (batch size, bands, model size) and, for a private
// example-level run, what the planner refuses before it builds a
// factorization (privacy.CheckRequest: more bands than steps, say), and
// per-layer clip bounds that do not match the model's layers. Unset
// settings take their defaults first.
func (c Config) Check() error {
	c.Defaults()
	if err := c.validate(); err != nil {
		return err
	}
	if err := c.checkClipPerLayer(); err != nil {
		return err
	}
	return c.checkPlan()
}

// CheckSettings refuses, with the error New would give, the settings of
// c that are wrong whatever the data (clip norm, learning rate, momentum,
// noise, epsilon and delta, accountant, workload, features, augmentation,
// adaptive clipping, EMA, cooldown, intervals): a command line checks its
// flags with it before loading a data set. Unset settings take their
// defaults first; Train and Test are not read.
func (c Config) CheckSettings() error {
	c.Defaults()
	return c.checkSettings()
}

// checkSettings is CheckSettings on a configuration with its defaults.
func (c *Config) checkSettings() error {
	bad := invalidf
	if c.Model == nil && c.Backend == nil {
		if err := models.CheckName(c.ModelName); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	if c.EmbeddingDim < 0 || c.EmbeddingDim > maxEmbeddingDim {
		return bad("embedding dimension %d: want 1 to %d (0: %d)", c.EmbeddingDim, maxEmbeddingDim, models.DefaultEmbeddingDim)
	}
	if c.EmbeddingDim != 0 && c.Model == nil && c.Backend == nil && c.ModelName != "tabular" {
		return bad("embedding dimension %d: only the tabular model embeds columns, not %q", c.EmbeddingDim, c.ModelName)
	}
	if c.EvalEvery < 0 {
		return bad("eval every %d steps: want a positive number (0: steps/5)", c.EvalEvery)
	}
	if c.CheckpointEvery < 0 {
		return bad("checkpoint every %d steps: want a positive number (0: only at the end)", c.CheckpointEvery)
	}
	for i, v := range c.ClipPerLayer {
		if !(v > 0) || math.IsInf(v, 0) {
			return bad("per-layer clip bound %d = %v must be positive and finite", i, v)
		}
	}
	if !(c.ClipNorm > 0) || math.IsInf(c.ClipNorm, 0) {
		return bad("clip norm %v must be positive and finite", c.ClipNorm)
	}
	if c.Train != nil && c.ClipNorm*float64(c.Train.Len()) > maxClippedSum {
		// Each unit adds at most the clip norm, so the float32 sum of a
		// step cannot overflow, whatever the data (docs/math.md, no
		// data-dependent control flow).
		return bad("clip norm %v times %d training examples exceeds %g: a step's clipped sum could overflow float32 for some data; use a smaller clip norm", c.ClipNorm, c.Train.Len(), maxClippedSum)
	}
	if !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0) {
		return bad("learning rate %v must be positive and finite", c.LearningRate)
	}
	switch c.Optimizer {
	case "", OptimizerSGD:
	case OptimizerAdam:
		if c.Momentum != 0 {
			return bad("momentum %v: Adam keeps its own first moment; heavy-ball momentum is for sgd", c.Momentum)
		}
	default:
		return bad("optimizer %q: want sgd or adam", c.Optimizer)
	}
	if !(c.Momentum >= 0 && c.Momentum < 1) {
		return bad("momentum %v must lie in [0,1)", c.Momentum)
	}
	if !c.Features.valid() {
		return bad("features %q: want scatter or none", c.Features)
	}
	if err := c.validateAccuracy(); err != nil {
		return err
	}
	if !(c.EMA >= 0 && c.EMA < 1) {
		return bad("EMA decay %v must lie in [0,1) (0: no averaging)", c.EMA)
	}
	if !(c.CooldownFrac >= 0 && c.CooldownFrac <= 1) {
		return bad("cooldown fraction %v must lie in [0,1]", c.CooldownFrac)
	}
	if c.NonPrivate {
		return nil
	}
	if c.NoiseMultiplier < 0 || math.IsNaN(c.NoiseMultiplier) || math.IsInf(c.NoiseMultiplier, 0) {
		return bad("noise multiplier %v must be positive and finite (or 0, to calibrate it for the target epsilon)", c.NoiseMultiplier)
	}
	if c.NoiseMultiplier == 0 && !(c.Epsilon > 0) {
		return bad("give a target epsilon > 0 or a noise multiplier (epsilon = %v)", c.Epsilon)
	}
	if c.Epsilon < 0 || math.IsNaN(c.Epsilon) || math.IsInf(c.Epsilon, 0) {
		return bad("epsilon %v must be positive and finite", c.Epsilon)
	}
	if c.Delta != 0 && !(c.Delta > 0 && c.Delta < 1) {
		return bad("delta %v must lie in (0,1)", c.Delta)
	}
	if _, err := c.Accountant.New(); err != nil {
		return bad("accountant %q: want pld or rdp", c.Accountant)
	}
	switch c.Workload {
	case WorkloadOptimizer, WorkloadPrefix:
	default:
		return bad("workload %q: want optimizer or prefix", c.Workload)
	}
	if c.Bands < 0 {
		return bad("bands = %d", c.Bands)
	}
	return nil
}
