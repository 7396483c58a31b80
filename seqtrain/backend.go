package seqtrain

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/train"
)

// Backend trains a transformer model (models.NewTransformer, or one read
// by models.ReadGPT2Dir) in the loop of package train: set it as
// train.Config.Backend. Its engine runs the model on nn.SeqPlan, clips
// each example's gradient with clip.Accumulator (the project's one
// clipping rule) and gives the loop only the trainable parameters
// (SeqPlan.Trainable: with a frozen base, the LoRA adapters and a
// classification head), so that noise is added to, and the optimizer
// updates, only those; the frozen base is never written.
type Backend struct {
	model models.Model
	net   nn.Transformer
	cfg   models.TransformerConfig

	mu  sync.Mutex
	eng *engine // the latest engine, whose parameters Save and Model read
}

// NewBackend returns the backend of a transformer model; any other model
// is refused.
func NewBackend(m models.Model) (*Backend, error) {
	net, cfg, ok := models.TransformerOf(m)
	if !ok {
		return nil, dpcore.Invalid("seqtrain", "backend: model %s is not a transformer", m.Name())
	}
	return &Backend{model: m, net: net, cfg: cfg}, nil
}

// Name is the model's.
func (b *Backend) Name() string { return b.model.Name() }

// InputShape is {Context, 1, 1}.
func (b *Backend) InputShape() [3]int { return b.model.InputShape() }

// Config is the transformer's configuration.
func (b *Backend) Config() models.TransformerConfig { return b.cfg }

// Model returns the model with the parameters the loop last wrote.
func (b *Backend) Model() models.Model {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eng != nil {
		b.eng.scatter()
	}
	return b.model
}

// Save writes the model's parameters as they stand (models.Model.Save),
// for checkpoints.
func (b *Backend) Save(w io.Writer) error { return b.Model().Save(w) }

// Load reads parameters written by Save into the model and its engine.
func (b *Backend) Load(r io.Reader) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.model.Load(r); err != nil {
		return err
	}
	if b.eng != nil {
		b.eng.gather()
	}
	return nil
}

// NewEngine builds the run's engine on a SeqPlan of opt.MaxBatch
// examples. Per-layer clipping is refused (the transformer's groups are
// not the model's layers).
func (b *Backend) NewEngine(opt clip.Options) (train.Engine, error) {
	acc, err := clip.NewAccumulator(opt)
	if err != nil {
		return nil, err
	}
	plan, err := nn.NewSeqPlan(b.net, b.model.Params(), nn.Options{MaxBatch: opt.MaxBatch})
	if err != nil {
		return nil, fmt.Errorf("seqtrain: %w", err)
	}
	e := &engine{b: b, plan: plan, acc: acc, ranges: plan.Trainable(), full: make([]float32, b.model.NumParams())}
	n := 0
	for _, r := range e.ranges {
		n += r.Len
	}
	e.params = make([]float32, n)
	e.gather()
	b.mu.Lock()
	b.eng = e
	b.mu.Unlock()
	return e, nil
}

// engine is the Backend's train.Engine.
type engine struct {
	b      *Backend
	plan   *nn.SeqPlan
	acc    *clip.Accumulator
	ranges []nn.Param // trainable ranges of the model's parameters
	params []float32  // the trainable parameters, what the loop updates
	full   []float32  // a step's sum over all parameters
}

// gather copies the model's trainable parameters into e.params.
func (e *engine) gather() {
	o := 0
	p := e.b.model.Params()
	for _, r := range e.ranges {
		o += copy(e.params[o:], p[r.Offset:r.Offset+r.Len])
	}
}

// scatter copies e.params into the model's trainable parameters.
func (e *engine) scatter() {
	o := 0
	p := e.b.model.Params()
	for _, r := range e.ranges {
		o += copy(p[r.Offset:r.Offset+r.Len], e.params[o:])
	}
}

// Params are the trainable parameters only, in the model's order.
func (e *engine) Params() []float32 { return e.params }

// clipper is the Accumulator as the executor's nn.Clipper: one flat
// factor from the example's norm over every group.
type clipper struct{ acc *clip.Accumulator }

func (c clipper) Scale(i int, sq []float64, linf float64, f []float64) {
	tot := 0.0
	for _, v := range sq {
		tot += v
	}
	k := c.acc.Factor(i, math.Sqrt(tot), linf)
	for l := range f {
		f[l] = k
	}
}

// ClippedSumContext writes the clipped sum of the examples' gradients of
// the trainable parameters into dst (len(Params())).
func (e *engine) ClippedSumContext(ctx context.Context, x []float32, y []int, dst []float32) (clip.Stats, error) {
	if len(dst) != len(e.params) {
		return clip.Stats{}, dpcore.Invalid("seqtrain", "clipped sum: len(dst) = %d, want %d", len(dst), len(e.params))
	}
	e.scatter()
	e.acc.Begin(nil, len(y))
	losses, err := e.plan.StepContext(ctx, x, y, e.full, clipper{e.acc})
	if err != nil {
		return clip.Stats{}, err
	}
	e.acc.Losses(0, losses)
	o := 0
	for _, r := range e.ranges {
		o += copy(dst[o:], e.full[r.Offset:r.Offset+r.Len])
	}
	return e.acc.Stats(), nil
}

// EvaluateContext returns the mean loss (per predicted token for a
// next-token model, so that its exponential is the perplexity) and the
// accuracy (Evaluate).
func (e *engine) EvaluateContext(ctx context.Context, x []float32, y []int) (loss, acc float64, err error) {
	e.scatter()
	r, err := Evaluate(ctx, planForwarder{e.plan, e.b.cfg}, x, y)
	if err != nil {
		return 0, 0, err
	}
	return r.Loss, r.Accuracy, nil
}

// CheckInputs refuses, before the run, inputs a step would refuse
// (nn.SeqPlan.CheckInputs): ids that are not integers in [0, Vocab),
// padding (-1) that is not a suffix, a row without a token.
func (e *engine) CheckInputs(x []float32) error { return e.plan.CheckInputs(x) }

// planForwarder is a SeqPlan as a Forwarder.
type planForwarder struct {
	plan *nn.SeqPlan
	cfg  models.TransformerConfig
}

func (p planForwarder) Context() int                   { return p.cfg.Context }
func (p planForwarder) Vocab() int                     { return p.cfg.Vocab }
func (p planForwarder) Classes() int                   { return p.cfg.Classes }
func (p planForwarder) Forward(x, out []float32) error { return p.plan.Forward(x, out) }
func (p planForwarder) LastLogits(x, out []float32) error {
	return p.plan.LastLogits(x, out)
}

// NewForwarder returns a transformer model as a Forwarder (for
// prediction and evaluation), on a SeqPlan of its own; ok is false for
// any other model.
func NewForwarder(m models.Model) (f Forwarder, ok bool, err error) {
	net, cfg, ok := models.TransformerOf(m)
	if !ok {
		return nil, false, nil
	}
	plan, err := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: 16})
	if err != nil {
		return nil, true, fmt.Errorf("seqtrain: %w", err)
	}
	return planForwarder{plan, cfg}, true, nil
}
