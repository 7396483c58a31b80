package train

import (
	"context"
	"io"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/models"
)

// Engine is the seam between the training loop and whatever computes
// clipped per-example gradient sums: the project's planned executor
// (clip.Engine, package nn) is one, an adapter for a user's gorgonia graph
// (package gorgoniadp) another. The loop samples the batch, asks the engine
// for the clipped sum, adds the plan's noise, divides by the expected batch
// size and lets the optimizer update Params in place; everything private
// about a step other than the clipped sum stays in the loop.
//
// An adapter for another Go framework is a small package: it owns the
// framework's model, exposes the parameters as one flat float32 vector the
// framework's tensors share (or copies them in before each call), and
// implements ClippedSumContext by computing each example's gradient and
// adding it to dst through a clip.Accumulator, which owns the clipping
// rule (docs/engines.md).
// Nothing about one example's data may stop, retry or slow the call
// (docs/math.md, no data-dependent control flow): an example whose input,
// loss, gradient or norm is not finite contributes zero and is counted in
// clip.Stats.NonFinite, and errors are for what the caller can fix.
type Engine interface {
	// Params is the parameter vector, one flat float32 slice in a fixed
	// order. The optimizer writes it in place between calls; the engine
	// must compute with what it holds at each call.
	Params() []float32
	// ClippedSumContext writes into dst (len(Params())) the sum over the
	// examples x (len(y) examples of C*H*W floats each, CHW order) with
	// labels y of their cross-entropy gradients, each clipped as the
	// engine's clip.Options say, and returns the batch's statistics.
	// Examples with a non-finite input, loss or gradient contribute
	// nothing and are counted; no example's values make it fail. It stops
	// with ctx's error when ctx is done.
	ClippedSumContext(ctx context.Context, x []float32, y []int, dst []float32) (clip.Stats, error)
	// EvaluateContext returns the mean cross-entropy and the accuracy on
	// x, y, stopping with ctx's error when ctx is done. x and y are the
	// evaluation set's own slices: they must not be written.
	EvaluateContext(ctx context.Context, x []float32, y []int) (loss, acc float64, err error)
}

// Backend is a model that builds its own Engine for a run: set it as
// Model.Backend to train a model that is not a models.Model, e.g. a
// gorgonia graph (gorgoniadp.Model). A Backend that also has a method
// Compiled() (ok bool, why string) and reports !ok (it runs on a slow
// path) has why printed as one line on Output.Log when Run starts; one
// with a method Classes() int must have as many as the training data.
type Backend interface {
	// Name identifies the model in results and checkpoints.
	Name() string
	// InputShape is the (channels, height, width) of one example; the
	// data must have it.
	InputShape() [3]int
	// NewEngine builds the run's engine. opt carries the run's clipping
	// (Norm or PerLayer, NonPrivate) and MaxBatch, the largest batch
	// ClippedSumContext is called with; an engine refuses what it cannot do
	// exactly.
	NewEngine(opt clip.Options) (Engine, error)
	// Save writes the parameters; Load reads what Save wrote into the
	// same architecture. Checkpoints hold what Save writes.
	Save(w io.Writer) error
	Load(r io.Reader) error
}

var _ Engine = (*clip.Engine)(nil)

// nnBackend trains a models.Model on the planned executor (clip.Engine).
type nnBackend struct{ models.Model }

func (b nnBackend) NewEngine(opt clip.Options) (Engine, error) { return clip.New(b.Model, opt) }

// NNBackend is the Backend a Config.Model is trained through: the model on
// the project's planned executor (clip.Engine).
func NNBackend(m models.Model) Backend { return nnBackend{m} }

// sized names a model and its parameter count (the run's settings).
type sized struct {
	name string
	d    int
}

func (s sized) Name() string   { return s.name }
func (s sized) NumParams() int { return s.d }

// slowPath is the line a Backend on a slow path asks Run to print, or "".
func slowPath(b Backend) string {
	if c, ok := b.(interface{ Compiled() (bool, string) }); ok {
		if ok, why := c.Compiled(); !ok {
			return why
		}
	}
	return ""
}
