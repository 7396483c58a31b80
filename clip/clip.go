// Package clip computes clipped sums of per-example gradients, the one step
// of differentially private training a non-private framework lacks.
//
// An Engine runs a models.Model on the planned executor of package nn:
// each batch is split into chunks that run forward and backward on one
// core each, every buffer allocated once in New. For each example the
// executor forms its gradient's squared L2 norm per layer, accumulated in
// float64 from exactly the float32 values that enter the sum:
//
//   - a convolution's per-example gradient U_i^T G_i (U_i the example's
//     im2col-unfolded input, G_i the gradient of the loss w.r.t. the
//     layer's pre-activation output) is materialized with one small GEMM,
//     the same flops as the batched weight gradient, and its scaled copy
//     is what is added;
//   - a dense layer's gradient is the outer product u_i g_i^T, whose
//     squared norm is ||u_i||^2 ||g_i||^2 (+ ||g_i||^2 for the bias), and
//     the clipped sum over a chunk is one GEMM U^T diag(c) G
//     ("book-keeping", Bu et al. 2022), c_i = min(1, zeta/||g_i||).
//
// Each factor comes from the package's one clipping rule, the
// Accumulator: the threshold carries a 2^-20 relative margin for the
// float64 norm's and the scaling's rounding, and every scaled entry is
// formed by nn.MulDown (factors and products that would be subnormal
// flushed to zero), so that no rounding, not even one into the subnormal
// range, can lift a contribution above zeta: the bound holds exactly, not
// up to a tolerance. Other engines (package gorgoniadp, an adapter for
// another framework) clip with the same Accumulator.
//
// No data-dependent control flow (docs/math.md): nothing about one
// example's (or user's) data stops, retries or slows a call. An example
// whose input, loss, gradient or norm is not finite contributes exactly
// zero and is counted in Stats.NonFinite; every finite one is scaled into
// the clip norm, however large its entries.
//
// Batches of any size up to Options.MaxBatch are accepted (Poisson
// sampling) with no padding and no re-planning: the executor's buffers are
// per core, not per batch.
package clip

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// ErrNonFiniteParams is returned (wrapped) when the model's parameters
// contain NaN or Inf.
var ErrNonFiniteParams = errors.New("non-finite model parameters")

// Options configures an Engine.
type Options struct {
	// Norm is the clipping threshold zeta on each example's gradient L2
	// norm over all layers (flat clipping). Required (> 0) unless
	// NonPrivate or PerLayer is set.
	Norm float64
	// PerLayer, when non-empty, clips each affine layer (weight and bias
	// together, in the order of models.Model.Layout, two entries per
	// layer) separately with its own threshold; len must equal the number
	// of layers. The total sensitivity is then the L2 norm of
	// PerLayer. Norm is ignored.
	PerLayer []float64
	// LInfZero, when > 0, zeroes an example's whole gradient if the L-inf
	// norm of its unclipped gradient exceeds it (Choquette-Choo et al.
	// 2023, "Multi-epoch matrix factorization mechanisms", App. F.3, used
	// 100*zeta).
	LInfZero float64
	// NonPrivate sums gradients without clipping or computing per-example
	// norms (non-finite examples are still dropped), for comparison runs
	// through the same code. Norm, PerLayer and LInfZero are ignored.
	NonPrivate bool
	// MaxBatch is the largest batch ClippedSum is called with.
	MaxBatch int
}

// Stats summarizes one ClippedSum call.
type Stats struct {
	// Examples is the number of examples in the batch (including dropped
	// ones).
	Examples int
	// Clipped is the fraction of Examples whose gradient was scaled down
	// (any layer, under per-layer clipping).
	Clipped float64
	// NonFinite counts examples whose loss or gradient was NaN or Inf;
	// they contribute nothing to the sum.
	NonFinite int
	// Zeroed counts finite examples dropped by the LInfZero rule.
	Zeroed int
	// WithinNorm counts the finite, kept examples (users, for
	// UserClippedSum) whose gradient norm is at most the clip norm: the
	// count adaptive clipping releases (zero under NonPrivate and
	// per-layer clipping).
	WithinNorm int
	// NormQuantiles are the 50%, 90%, 99% quantiles and the maximum of the
	// finite examples' unclipped gradient L2 norms (all layers); zero
	// under NonPrivate.
	NormQuantiles [4]float64
	// Loss is the mean cross-entropy over the finite examples (0 if
	// there are none).
	Loss float64
}

// Engine computes clipped gradient sums for one model. It owns scratch
// buffers and is not safe for concurrent use.
type Engine struct {
	m       models.Model
	opt     Options // as given to New; the rule's fields are acc's
	plan    *nn.Plan
	chw     int
	classes int
	naff    int

	// acc clips the units of the current call and counts them: the
	// executor's workers call it for each example (clipper), off is the
	// index of the call's first example within the batch (not 0 within
	// ClippedSumPieces).
	acc    *Accumulator
	off    int
	logits []float32 // Evaluate, Predict: MaxBatch x classes

	// adding: within ClippedSumPieces, whose sum the plan keeps.
	adding bool

	// UserClippedSum's buffers (user.go), allocated on first use.
	capture [][]float32
	userAcc []float64
	userOK  []bool
	userSq  []float64
}

// New plans the executor for m. The model's parameter buffer is shared,
// not copied: later writes to m.Params() are seen by the engine.
func New(m models.Model, opt Options) (*Engine, error) {
	if m == nil {
		return nil, dpcore.Invalid("clip", "new: nil model")
	}
	if opt.MaxBatch <= 0 {
		return nil, dpcore.Invalid("clip", "new: MaxBatch %d", opt.MaxBatch)
	}
	opt, err := opt.rule()
	if err != nil {
		return nil, dpcore.Invalid("clip", "new: %w", err)
	}
	plan, err := nn.NewPlan(m.Network(), m.Params(), nn.Options{MaxBatch: opt.MaxBatch, LInf: opt.LInfZero > 0})
	if err != nil {
		return nil, fmt.Errorf("clip: new: %w", err)
	}
	in := m.InputShape()
	e := &Engine{m: m, opt: opt, plan: plan, chw: in[0] * in[1] * in[2], classes: m.Classes(), naff: plan.Affine(), acc: newAccumulator(opt)}
	if len(opt.PerLayer) > 0 && len(opt.PerLayer) != e.naff {
		return nil, dpcore.Invalid("clip", "new: %d per-layer norms for %d layers", len(opt.PerLayer), e.naff)
	}
	return e, nil
}

// clipper is the Engine as the executor's nn.Clipper: example i of the
// current call is unit off+i of the batch's Accumulator.
type clipper Engine

func (c *clipper) Scale(i int, sq []float64, linf float64, f []float64) {
	e := (*Engine)(c)
	e.acc.scale(e.off+i, sq, linf, f)
}

// SetNorm changes the flat clipping threshold for the following calls
// (adaptive clipping). It refuses an engine built without flat clipping
// and a norm that is not positive and finite.
func (e *Engine) SetNorm(norm float64) error { return e.acc.SetNorm(norm) }

// CheckInputs checks examples x (CHW each, any number) as ClippedSum
// would (nn.Plan.CheckInputs: an embedding's ids): train.New checks the
// whole training set with it, so that no step fails on one example's
// values.
func (e *Engine) CheckInputs(x []float32) error {
	if err := e.plan.CheckInputs(x); err != nil {
		return fmt.Errorf("clip: %w", err)
	}
	return nil
}

// Norm is the flat clipping threshold of the next call.
func (e *Engine) Norm() float64 { return e.acc.Norm() }

// Params is the model's parameter buffer itself (models.Model.Params): the
// engine computes with whatever it holds at each call.
func (e *Engine) Params() []float32 { return e.m.Params() }

// checkParams rejects a model whose parameters are not all finite: one
// NaN weight poisons every example.
func (e *Engine) checkParams() error {
	params := e.m.Params()
	if i := nn.FirstNonFinite(params); i >= 0 {
		return fmt.Errorf("parameter %d is %v: %w", i, params[i], ErrNonFiniteParams)
	}
	return nil
}

// ClippedSum runs one batched pass on the examples x (len(y) examples,
// each C*H*W floats in CHW order) with labels y, and writes into dst
// (len NumParams, aligned with the model's parameter buffer) the sum of
// the per-example gradients of the cross-entropy loss, each clipped as the
// Options say. dst is overwritten. Dropped examples (non-finite or
// LInfZero) contribute zero.
func (e *Engine) ClippedSum(x []float32, y []int, dst []float32) (Stats, error) {
	return e.ClippedSumContext(context.Background(), x, y, dst)
}

// ClippedSumContext is ClippedSum, stopping between chunks of examples
// when ctx is done; it then returns ctx's error and dst
// holds no meaningful sum.
func (e *Engine) ClippedSumContext(ctx context.Context, x []float32, y []int, dst []float32) (Stats, error) {
	var st Stats
	if len(dst) != e.m.NumParams() {
		return st, dpcore.Invalid("clip", "clipped sum: len(dst) = %d, want %d", len(dst), e.m.NumParams())
	}
	if err := e.checkParams(); err != nil {
		return st, fmt.Errorf("clip: clipped sum: %w", err)
	}
	n := len(y)
	if n == 0 || n > e.opt.MaxBatch {
		return st, dpcore.Invalid("clip", "clipped sum: batch of %d not in [1, MaxBatch=%d]", n, e.opt.MaxBatch)
	}
	if len(x) != n*e.chw {
		return st, dpcore.Invalid("clip", "clipped sum: %d floats for %d examples of %d", len(x), n, e.chw)
	}
	if !e.adding {
		e.acc.Begin(nil, n)
		e.off = 0
	}
	var c nn.Clipper
	if e.acc.private() {
		c = (*clipper)(e)
	}
	losses, err := e.step(ctx, x, y, dst, c)
	if err != nil {
		return st, fmt.Errorf("clip: clipped sum: %w", err)
	}
	e.acc.Losses(e.off, losses)
	e.off += n
	if e.adding {
		return st, nil
	}
	return e.acc.Stats(), nil
}

// forward checks a forward-only batch and writes its logits into
// e.logits.
func (e *Engine) forward(x []float32) ([]float32, error) {
	return e.forwardContext(context.Background(), x)
}

func (e *Engine) forwardContext(ctx context.Context, x []float32) ([]float32, error) {
	n := len(x) / e.chw
	for i := range n {
		for _, v := range x[i*e.chw : (i+1)*e.chw] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, dpcore.Invalidf("example %d has a non-finite input", i)
			}
		}
	}
	if e.logits == nil {
		e.logits = make([]float32, e.opt.MaxBatch*e.classes)
	}
	lg := e.logits[:n*e.classes]
	if err := e.plan.ForwardContext(ctx, x, lg); err != nil {
		return nil, err
	}
	return lg, nil
}

// exampleLoss is the cross-entropy (float64 log-sum-exp) of one row of
// logits and its argmax.
func exampleLoss(row []float32, y int) (float64, int) {
	mx := math.Inf(-1)
	arg := 0
	for j, v := range row {
		if float64(v) > mx {
			mx, arg = float64(v), j
		}
	}
	if y < 0 {
		return 0, arg
	}
	s := 0.0
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(s) - float64(row[y]), arg
}

// Evaluate returns the mean cross-entropy and the accuracy of the model on
// the examples x with labels y, in forward-only batches of MaxBatch.
func (e *Engine) Evaluate(x []float32, y []int) (loss, acc float64, err error) {
	return e.EvaluateContext(context.Background(), x, y)
}

// EvaluateContext is Evaluate, stopping between batches when ctx is done.
func (e *Engine) EvaluateContext(ctx context.Context, x []float32, y []int) (loss, acc float64, err error) {
	if len(y) == 0 || len(x) != len(y)*e.chw {
		return 0, 0, dpcore.Invalid("clip", "evaluate: %d floats for %d examples of %d", len(x), len(y), e.chw)
	}
	for i, c := range y {
		if c < 0 || c >= e.classes {
			return 0, 0, dpcore.Invalid("clip", "evaluate: label %d of example %d not in [0,%d)", c, i, e.classes)
		}
	}
	if err := e.checkParams(); err != nil {
		return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
	}
	B := e.opt.MaxBatch
	sum, correct := 0.0, 0
	for s := 0; s < len(y); s += B {
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
		}
		t := min(s+B, len(y))
		lg, err := e.forwardContext(ctx, x[s*e.chw:t*e.chw])
		if err != nil {
			return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
		}
		for i := range t - s {
			l, pred := exampleLoss(lg[i*e.classes:(i+1)*e.classes], y[s+i])
			sum += l
			if pred == y[s+i] {
				correct++
			}
		}
	}
	return sum / float64(len(y)), float64(correct) / float64(len(y)), nil
}

// Predict returns the most likely class of each example in x.
func (e *Engine) Predict(x []float32) ([]int, error) {
	n := len(x) / e.chw
	if n == 0 || len(x) != n*e.chw {
		return nil, dpcore.Invalid("clip", "predict: len(x) = %d is not a positive multiple of %d", len(x), e.chw)
	}
	if err := e.checkParams(); err != nil {
		return nil, fmt.Errorf("clip: predict: %w", err)
	}
	B := e.opt.MaxBatch
	out := make([]int, n)
	for s := 0; s < n; s += B {
		t := min(s+B, n)
		lg, err := e.forward(x[s*e.chw : t*e.chw])
		if err != nil {
			return nil, fmt.Errorf("clip: predict: %w", err)
		}
		for i := range t - s {
			_, out[s+i] = exampleLoss(lg[i*e.classes:(i+1)*e.classes], -1)
		}
	}
	return out, nil
}
