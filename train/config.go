package train

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/privacy"
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

// Config is a whole training run, by concern: the data, the model, the
// privacy request the planner takes (handed to it as it is), the
// optimizer, the outputs and the memory bounds. Each optional feature is
// one typed pointer, nil when off, that owns its validation and its
// checkpoint state: Data.Augment (augmentation and its multiplicity),
// Privacy.UserBound (user-level privacy), Privacy.Quantile (adaptive
// clipping), Optimizer.Warmup and Optimizer.EMA. Hooks attach
// non-private work to the loop.
//
// The zero value is not runnable: Data.Train, the model (Model.Built,
// Model.Name or Model.Backend), Privacy.Steps and Privacy.Batch are
// required. See Defaults.
type Config struct {
	Data  Data
	Model ModelSpec
	// Privacy is the planner's request (package privacy). The run fills
	// in what it derives (the number of units, the optimizer's workload,
	// the unit of privacy from UserBound, the ledger's notes) and hands
	// it over; its Steps, Batch, ClipNorm and Seed are the run's, private
	// or not. UserBound, when set, makes the unit of privacy one user
	// (users.go); Quantile, when set, makes ClipNorm the initial clip norm
	// of adaptive clipping (adaptive.go).
	Privacy privacy.Request
	// NonPrivate trains without noise or clipping (and without a plan).
	NonPrivate bool
	Optimizer  Optimizer
	Output     Output
	Memory     Memory
	// Hooks attach non-private work to the loop (hooks.go), after the
	// run's own (parameter average, metrics, evaluation, checkpoints).
	Hooks []Hook
}

// Data is what a run trains and evaluates on.
type Data struct {
	Train, Test *data.Dataset
	// Validation says Test was held out of the training data to choose
	// hyperparameters: evaluations are labelled SplitValidation, and
	// listed as not covered by the guarantee (the held-out examples are
	// private data).
	Validation bool
	// Features is a fixed per-example transform applied to the training
	// and test examples before the model sees them: FeaturesPixels (none)
	// or FeaturesScatter. The "scatternet" model sets FeaturesScatter.
	Features Features
	// Augment, when set, applies random crop (pad 4) and horizontal flip
	// to training examples, deterministically from the seed, step and
	// example, with its multiplicity (augmult.go).
	Augment *Augmentation
}

// ModelSpec is the model of a run: a built model, a named one with its
// knobs, or a Backend.
type ModelSpec struct {
	// Built is a model built by the caller (NewModel builds one as Run
	// would).
	Built models.Model
	// Name is a model to build: "logistic", "mlp", "cnn", "cnn-small", "wrn16-4",
	// "tabular", or "scatternet" (GroupNorm and a linear layer on
	// scattering features, Tramèr and Boneh 2021).
	Name   string
	Hidden []int
	// Categorical are the vocabulary sizes of the categorical columns of a
	// table, its last len(Categorical) features (data.Tabular's
	// Cardinalities), which the "tabular" model embeds.
	Categorical []int
	// EmbeddingDim is the dimension in which the "tabular" model embeds
	// each categorical column (0: 8).
	EmbeddingDim int
	// Groups is the number of GroupNorm groups of "scatternet" and
	// "wrn16-4" (0: the architecture's default, 27 and 16).
	Groups int
	// Backend, when set, is the model together with the engine that
	// computes its clipped gradient sums (Engine), e.g. a user's gorgonia
	// graph through package gorgoniadp; Built, Name and the named
	// models' knobs are then ignored.
	Backend Backend
	// ClipPerLayer, when set, clips each affine layer's gradient (weight
	// and bias together, in network order) to its own bound, as Opacus
	// and jax_privacy offer. An example's whole gradient then has norm at
	// most the L2 norm of the bounds, which Defaults sets as
	// Privacy.ClipNorm (the sensitivity the noise is calibrated to),
	// replacing any other value.
	ClipPerLayer []float64
}

// Optimizer is the update rule and its schedule: heavy-ball momentum (0 =
// plain SGD) or Adam, with the learning rate linearly cooled down to 0.05x
// over the last CooldownFrac of steps (and warmed up over the first
// Warmup.Steps, when set).
type Optimizer struct {
	// Rule is OptimizerSGD ("" too; heavy-ball momentum when Momentum >
	// 0) or OptimizerAdam. Adam is not linear in the gradients: with
	// WorkloadOptimizer a matrix mechanism is then factorized for the
	// prefix sum, and Adam reads the privatized gradients as
	// post-processing; the claim is the same.
	Rule         OptimizerChoice
	LearningRate float64
	Momentum     float64
	CooldownFrac float64
	// Workload says which map a matrix mechanism is factorized for.
	Workload WorkloadChoice
	// Warmup, when set, ramps the learning rate up linearly (warmup.go).
	Warmup *Warmup
	// EMA, when set, averages the parameters after each update (ema.go).
	EMA *EMA
}

// Output is what a run writes and reports.
type Output struct {
	EvalEvery       int
	CheckpointPath  string
	CheckpointEvery int
	MetricsPath     string
	// OnStep and OnEval are called after each step and evaluation.
	OnStep func(StepMetrics)
	OnEval func(EvalMetrics)
	// OnFeatures is called while the features of Data.Features are
	// computed (not when they are read from the cache), after every block
	// of examples.
	OnFeatures func(FeaturesProgress)
	// Log receives human-readable plan and summary lines (nil: none).
	Log io.Writer

	// slowWrite, set only by this package's crash tests, pauses every
	// checkpoint write before its rename, and every metrics record (a
	// quarter of it) halfway, so that kills land inside those writes.
	slowWrite time.Duration
}

// Memory bounds what a step holds at once; neither bound changes the
// result.
type Memory struct {
	// PhysicalBatch bounds the examples gathered at once (0:
	// DefaultPhysicalBatch): a larger batch runs in pieces whose clipped
	// sum the engine (a PhysicalEngine, such as the planned executor)
	// accumulates exactly as for the whole batch.
	PhysicalBatch int
	// NoiseBudget bounds the noise source's state in bytes (0: none).
	NoiseBudget int64
}

// Defaults fills unset knobs: clip norm 1, PLD accounting, learning rate
// 0.5 for plain SGD and 0.1 with momentum, the mechanism's workload taken
// from the optimizer, and an evaluation every fifth of the run; each
// optional feature fills its own. The features' values are copied, never
// written through the caller's pointers.
func (c *Config) Defaults() {
	p := &c.Privacy
	if p.Mechanism == nil && !c.NonPrivate {
		p.Mechanism = privacy.DefaultMechanism()
	}
	if p.ClipNorm == 0 {
		p.ClipNorm = 1
	}
	if p.Accountant == "" {
		p.Accountant = privacy.PLD
	}
	c.Optimizer.defaults()
	if c.Output.EvalEvery == 0 {
		c.Output.EvalEvery = max(1, p.Steps/5)
	}
	m := &c.Model
	if m.Name == "" && m.Built == nil && m.Backend == nil {
		m.Name = "mlp"
	}
	if m.Name == "scatternet" && m.Built == nil && c.Data.Features == FeaturesPixels {
		c.Data.Features = FeaturesScatter
	}
	if len(m.ClipPerLayer) > 0 {
		p.ClipNorm = l2(m.ClipPerLayer)
	}
	p.UserBound = userDefaults(p.UserBound)
}

func (o *Optimizer) defaults() {
	if o.LearningRate == 0 {
		// Heavy-ball momentum beta multiplies the effective step by
		// 1/(1-beta) (20 at 0.95); 0.1 keeps the papers' momentum stable
		// where 0.5 diverges on the CNN (measured, BENCHMARKS.md).
		o.LearningRate = 0.5
		if o.Momentum > 0 {
			o.LearningRate = 0.1
		}
		if o.Rule == OptimizerAdam {
			o.LearningRate = 0.001 // Kingma and Ba's default
		}
	}
	if o.Workload == "" {
		o.Workload = WorkloadOptimizer
	}
}

func l2(v []float64) float64 {
	sq := 0.0
	for _, x := range v {
		sq += x * x
	}
	return math.Sqrt(sq)
}

func (c *Config) validate() error {
	bad := invalidf
	train, p := c.Data.Train, &c.Privacy
	if train == nil || train.Len() == 0 {
		return bad("no training data")
	}
	if p.Steps <= 0 {
		return bad("steps = %d must be positive", p.Steps)
	}
	if c.Memory.PhysicalBatch < 0 {
		return bad("physical batch %d must be positive (0: %d)", c.Memory.PhysicalBatch, DefaultPhysicalBatch)
	}
	if p.UserBound != nil || p.Unit == privacy.UnitUser {
		if err := checkUsers(p.UserBound, c.facts()); err != nil {
			return err
		}
	} else if p.Batch <= 0 || p.Batch > train.Len() {
		return bad("batch = %d must lie in [1, %d examples]", p.Batch, train.Len())
	}
	if err := c.checkSizes(); err != nil {
		return err
	}
	if err := c.checkSettings(); err != nil {
		return err
	}
	if c.NonPrivate {
		return nil
	}
	if m := train.Len() / p.Batch; p.Partitions > m {
		return invalidf("bands = %d: band sampling needs at least a batch in each partition, so at most examples/batch = %d/%d = %d bands", p.Partitions, train.Len(), p.Batch, m)
	}
	return nil
}

// maxClippedSum bounds the clip norm times the training examples: a
// step's clipped sum then stays far inside the float32 range (3.4e38),
// with room for the noise.
const maxClippedSum = 1e30

// CheckSettings refuses, with the error New would give, the settings of
// c that are wrong whatever the data (clip norm, learning rate, momentum,
// noise, epsilon and delta, accountant, workload, features, the optional
// features' own settings, intervals): a command line checks its flags
// with it before loading a data set. Unset settings take their defaults
// first; the data are not read.
func (c Config) CheckSettings() error {
	c.Defaults()
	return c.checkSettings()
}

// checkSettings is CheckSettings on a configuration with its defaults:
// the model's, the optimizer's, the outputs', the privacy request's, then
// each optional feature's own checks.
func (c *Config) checkSettings() error {
	r := c.facts()
	for _, check := range []func() error{
		c.Model.check, c.checkClip, c.Optimizer.check, c.Output.check, c.checkPrivacy,
		// The optional features check themselves.
		func() error { return c.Data.Augment.check(r) },
		func() error { return checkQuantile(c.Privacy.Quantile, r) },
		c.Optimizer.EMA.check,
		func() error { return c.Optimizer.Warmup.check(r.steps) },
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// facts are what the optional features' checks read of c.
func (c *Config) facts() runFacts {
	return runFacts{
		nonPrivate: c.NonPrivate, perUser: c.Privacy.UserBound != nil,
		perLayer: len(c.Model.ClipPerLayer) > 0, checkpoints: c.Output.CheckpointPath != "",
		features: c.Data.Features, steps: c.Privacy.Steps, batch: c.Privacy.Batch, train: c.Data.Train,
	}
}

// maxEmbeddingDim bounds ModelSpec.EmbeddingDim.
const maxEmbeddingDim = 4096

func (m *ModelSpec) check() error {
	bad := invalidf
	if m.Built == nil && m.Backend == nil {
		if err := models.CheckName(m.Name); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	if m.EmbeddingDim < 0 || m.EmbeddingDim > maxEmbeddingDim {
		return bad("embedding dimension %d: want 1 to %d (0: %d)", m.EmbeddingDim, maxEmbeddingDim, models.DefaultEmbeddingDim)
	}
	if m.EmbeddingDim != 0 && m.Built == nil && m.Backend == nil && m.Name != "tabular" {
		return bad("embedding dimension %d: only the tabular model embeds columns, not %q", m.EmbeddingDim, m.Name)
	}
	if m.Groups < 0 {
		return bad("groups %d: want a positive number of GroupNorm groups (0: the model's default)", m.Groups)
	}
	if m.Groups != 0 && m.Built == nil && m.Backend == nil && !models.GroupNormed(m.Name) {
		return bad("groups %d: only scatternet and wrn16-4 have GroupNorm layers, not %q", m.Groups, m.Name)
	}
	for i, v := range m.ClipPerLayer {
		if !(v > 0) || math.IsInf(v, 0) {
			return bad("per-layer clip bound %d = %v must be positive and finite", i, v)
		}
	}
	return nil
}

func (c *Config) checkClip() error {
	norm := c.Privacy.ClipNorm
	if !(norm > 0) || math.IsInf(norm, 0) {
		return invalidf("clip norm %v must be positive and finite", norm)
	}
	if tr := c.Data.Train; tr != nil && norm*float64(tr.Len()) > maxClippedSum {
		// Each unit adds at most the clip norm, so the float32 sum of a
		// step cannot overflow, whatever the data (docs/math.md, no
		// data-dependent control flow).
		return invalidf("clip norm %v times %d training examples exceeds %g: a step's clipped sum could overflow float32 for some data; use a smaller clip norm", norm, tr.Len(), maxClippedSum)
	}
	if !c.Data.Features.valid() {
		return invalidf("features %q: want scatter or none", c.Data.Features)
	}
	return nil
}

func (o *Optimizer) check() error {
	bad := invalidf
	if !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0) {
		return bad("learning rate %v must be positive and finite", o.LearningRate)
	}
	switch o.Rule {
	case "", OptimizerSGD:
	case OptimizerAdam:
		if o.Momentum != 0 {
			return bad("momentum %v: Adam keeps its own first moment; heavy-ball momentum is for sgd", o.Momentum)
		}
	default:
		return bad("optimizer %q: want sgd or adam", o.Rule)
	}
	if !(o.Momentum >= 0 && o.Momentum < 1) {
		return bad("momentum %v must lie in [0,1)", o.Momentum)
	}
	if !(o.CooldownFrac >= 0 && o.CooldownFrac <= 1) {
		return bad("cooldown fraction %v must lie in [0,1]", o.CooldownFrac)
	}
	return nil
}

func (o *Output) check() error {
	if o.EvalEvery < 0 {
		return invalidf("eval every %d steps: want a positive number (0: steps/5)", o.EvalEvery)
	}
	if o.CheckpointEvery < 0 {
		return invalidf("checkpoint every %d steps: want a positive number (0: only at the end)", o.CheckpointEvery)
	}
	return nil
}

// checkPrivacy checks what the trainer reads of the request (the planner
// checks the rest when it plans).
func (c *Config) checkPrivacy() error {
	if c.NonPrivate {
		return nil
	}
	bad, p := invalidf, &c.Privacy
	if p.NoiseMultiplier < 0 || math.IsNaN(p.NoiseMultiplier) || math.IsInf(p.NoiseMultiplier, 0) {
		return bad("noise multiplier %v must be positive and finite (or 0, to calibrate it for the target epsilon)", p.NoiseMultiplier)
	}
	if p.NoiseMultiplier == 0 && !(p.Epsilon > 0) {
		return bad("give a target epsilon > 0 or a noise multiplier (epsilon = %v)", p.Epsilon)
	}
	if p.Epsilon < 0 || math.IsNaN(p.Epsilon) || math.IsInf(p.Epsilon, 0) {
		return bad("epsilon %v must be positive and finite", p.Epsilon)
	}
	if p.Delta != 0 && !(p.Delta > 0 && p.Delta < 1) {
		return bad("delta %v must lie in (0,1)", p.Delta)
	}
	if _, err := p.Accountant.New(); err != nil {
		return bad("accountant %q: want pld or rdp", p.Accountant)
	}
	switch c.Optimizer.Workload {
	case WorkloadOptimizer, WorkloadPrefix:
	default:
		return bad("workload %q: want optimizer or prefix", c.Optimizer.Workload)
	}
	if p.Partitions < 0 {
		return bad("bands = %d", p.Partitions)
	}
	return nil
}

// checkSizes refuses the user-given sizes of a run that cannot fit, before
// the model, the plan or any per-step array is allocated: the number of
// steps, and the parameters of the model (hidden sizes, embedding
// dimension) with the buffers kept per parameter.
func (c *Config) checkSizes() error {
	if c.Privacy.Steps > MaxSteps {
		return invalidf("steps = %d: per-step arrays would need %s each (8 bytes a step); the limit is %d steps",
			c.Privacy.Steps, dpcore.HumanBytes(8*float64(c.Privacy.Steps)), MaxSteps)
	}
	if c.Model.Built != nil || c.Data.Train == nil {
		return nil
	}
	d := c.estimateParams()
	// Parameters, gradient sum, chunk sum, noise row, momentum and one
	// accumulator per worker at least: 8 float32 arrays of d.
	if err := checkMemory(fmt.Sprintf("model %s with %.4g parameters", c.Model.Name, d), 8*4*d); err != nil {
		return err
	}
	return nil
}

// estimateParams is the parameter count of a dense model named by the
// configuration (models.Named.EstimateParams).
func (c *Config) estimateParams() float64 {
	return c.Model.named().EstimateParams(c.Data.Train.Shape.Size(), c.Data.Train.Classes)
}

// named is the model m.Name names, with its settings.
func (m *ModelSpec) named() models.Named {
	return models.Named{Name: m.Name, Hidden: m.Hidden, Categorical: m.Categorical, EmbeddingDim: m.EmbeddingDim, Groups: m.Groups}
}
