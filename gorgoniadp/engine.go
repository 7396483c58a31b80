package gorgoniadp

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/dpcore"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Engine computes clipped per-example gradient sums of a Model. It
// implements train.Engine and is not safe for concurrent use.
type Engine struct {
	m    *Model
	opt  clip.Options
	acc  *clip.Accumulator // the clipping rule and statistics of the per-example path
	fast *fastEngine       // the batched executor of a compiled graph, or nil
}

func newEngine(m *Model, opt clip.Options) (*Engine, error) {
	if opt.MaxBatch <= 0 {
		return nil, dpcore.Invalid("gorgoniadp", "engine: MaxBatch %d", opt.MaxBatch)
	}
	if !opt.NonPrivate && len(opt.PerLayer) > 0 {
		return nil, dpcore.Invalid("gorgoniadp", "engine: per-layer clipping is not supported (the graph has no layers, only parameters): give one clip norm")
	}
	acc, err := clip.NewAccumulator(opt)
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: engine: %w", err)
	}
	fast, err := m.newFast(opt)
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: engine: %w", err)
	}
	return &Engine{m: m, opt: opt, acc: acc, fast: fast}, nil
}

// Params is the model's flat parameter buffer (Model.Params).
func (e *Engine) Params() []float32 { return e.m.flat }

// float32s is the float32 contents of a value.
func float32s(v gorgonia.Value) ([]float32, error) {
	switch v := v.(type) {
	case *tensor.Dense:
		if d, ok := v.Data().([]float32); ok {
			return d, nil
		}
		if f, ok := v.Data().(float32); ok {
			return []float32{f}, nil
		}
	case *gorgonia.F32:
		return []float32{float32(*v)}, nil
	}
	return nil, fmt.Errorf("value %v of type %T is not float32", v, v)
}

func (m *Model) checkExample(x []float32, y int) error {
	if len(x) != len(m.x) {
		return dpcore.Invalidf("an example has %d values, the input node %d", len(x), len(m.x))
	}
	if y < 0 || y >= m.classes {
		return dpcore.Invalidf("label %d not in [0,%d)", y, m.classes)
	}
	return nil
}

// gradient runs example x with label y forward and backward and leaves
// its gradient in m.gbuf; it returns the loss. An example with a
// non-finite input, or whose max-pooling windows overflow (poolsOK), is
// never run through the training graph (gorgonia's max pooling indexes
// out of range, and kills the process, on a window of NaNs): its loss is
// NaN and so is its gradient (the engine counts it as non-finite).
func (m *Model) gradient(x []float32, y int) (float64, error) {
	ok := allFinite(x)
	if ok {
		var err error
		if ok, err = m.poolsOK(x); err != nil {
			return 0, err
		}
	}
	if !ok {
		nan := float32(math.NaN())
		for i := range m.gbuf {
			m.gbuf[i] = nan
		}
		return math.NaN(), nil
	}
	copy(m.x, x)
	clear(m.y)
	m.y[y] = 1
	if err := run(m.train); err != nil {
		return 0, err
	}
	lv, err := float32s(m.g.Loss.Value())
	if err != nil {
		return 0, fmt.Errorf("loss: %w", err)
	}
	for i, gn := range m.grads {
		gv, err := float32s(gn.Value())
		if err != nil {
			return 0, fmt.Errorf("gradient of %s: %w", m.names[i], err)
		}
		off := m.offsets[i]
		if len(gv) != m.views[i].Size() {
			return 0, fmt.Errorf("gradient of %s has %d values, the parameter %d", m.names[i], len(gv), m.views[i].Size())
		}
		copy(m.gbuf[off:off+len(gv)], gv)
	}
	return float64(lv[0]), nil
}

// run resets and runs a compiled graph, turning gorgonia's panics into
// errors.
func run(vm gorgonia.VM) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("running the graph: gorgonia failed: %v", oneLine(fmt.Sprint(r)))
		}
	}()
	vm.Reset()
	if err := vm.RunAll(); err != nil {
		return fmt.Errorf("running the graph: %v", oneLine(err.Error()))
	}
	return nil
}

// Gradient writes into dst (len NumParams) the unclipped gradient of the
// loss of one example x with label y, in the order of Params, and returns
// the loss (NaN, with a zero gradient, for an example whose input is not
// finite or whose max pooling overflows).
func (e *Engine) Gradient(x []float32, y int, dst []float32) (float64, error) {
	if len(dst) != len(e.m.flat) {
		return 0, dpcore.Invalid("gorgoniadp", "gradient: len(dst) = %d, want %d", len(dst), len(e.m.flat))
	}
	if err := e.m.checkExample(x, y); err != nil {
		return 0, fmt.Errorf("gorgoniadp: gradient: %w", err)
	}
	if e.fast != nil {
		return e.fastGradient(x, y, dst)
	}
	l, err := e.m.gradient(x, y)
	if err != nil {
		return 0, fmt.Errorf("gorgoniadp: gradient: %w", err)
	}
	copy(dst, e.m.gbuf)
	return l, nil
}

func (e *Engine) checkParams() error {
	for i, v := range e.m.flat {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("parameter %d is %v: %w", i, v, clip.ErrNonFiniteParams)
		}
	}
	return nil
}

// ClippedSum computes the clipped sum of a batch: each example runs alone
// through the graph and its gradient enters dst, which is overwritten,
// through a clip.Accumulator (Add: the L2 norm over all parameters taken in
// float64, the gradient scaled by the clip factor with subnormal factors
// and products flushed to zero, so the contribution's norm is at most
// Norm exactly). Examples whose loss or gradient is not finite contribute
// nothing and are counted in Stats.NonFinite; examples whose L-inf norm
// exceeds LInfZero contribute nothing. Nothing about one example's data
// stops the call.
func (e *Engine) ClippedSum(x []float32, y []int, dst []float32) (clip.Stats, error) {
	return e.ClippedSumContext(context.Background(), x, y, dst)
}

// ClippedSumContext is ClippedSum, stopping with ctx's error between
// examples when ctx is done (dst is then incomplete).
func (e *Engine) ClippedSumContext(ctx context.Context, x []float32, y []int, dst []float32) (clip.Stats, error) {
	if err := e.checkBatch(x, y, dst); err != nil {
		return clip.Stats{}, err
	}
	if e.fast != nil {
		return e.fastClippedSum(ctx, x, y, dst)
	}
	m := e.m
	n, chw := len(y), len(m.x)
	e.acc.Begin(dst, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return clip.Stats{}, fmt.Errorf("gorgoniadp: clipped sum: %w", err)
		}
		loss, err := m.gradient(x[i*chw:(i+1)*chw], y[i])
		if err != nil {
			return clip.Stats{}, fmt.Errorf("gorgoniadp: clipped sum: example %d: %w", i, err)
		}
		e.acc.Add(i, m.gbuf, loss)
	}
	return e.acc.Stats(), nil
}

// checkBatch refuses a batch ClippedSum cannot take.
func (e *Engine) checkBatch(x []float32, y []int, dst []float32) error {
	m := e.m
	n, chw := len(y), len(m.x)
	if len(dst) != len(m.flat) {
		return dpcore.Invalid("gorgoniadp", "clipped sum: len(dst) = %d, want %d", len(dst), len(m.flat))
	}
	if n == 0 || n > e.opt.MaxBatch {
		return dpcore.Invalid("gorgoniadp", "clipped sum: batch of %d not in [1, MaxBatch=%d]", n, e.opt.MaxBatch)
	}
	if len(x) != n*chw {
		return dpcore.Invalid("gorgoniadp", "clipped sum: %d floats for %d examples of %d", len(x), n, chw)
	}
	for i, c := range y {
		if c < 0 || c >= m.classes {
			return dpcore.Invalid("gorgoniadp", "clipped sum: label %d of example %d not in [0,%d)", c, i, m.classes)
		}
	}
	if err := e.checkParams(); err != nil {
		return fmt.Errorf("gorgoniadp: clipped sum: %w", err)
	}
	return nil
}

// finite reports whether every value of v is finite.
func allFinite(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}

// Logits runs example x forward and returns its logits (valid until the
// next call).
func (e *Engine) Logits(x []float32) ([]float32, error) {
	if len(x) != len(e.m.x) {
		return nil, dpcore.Invalid("gorgoniadp", "logits: an example has %d values, the input node %d", len(x), len(e.m.x))
	}
	return e.m.logits(x)
}

func (m *Model) logits(x []float32) ([]float32, error) {
	copy(m.x, x)
	for _, d := range m.drops {
		d.SetTraining(false)
		defer d.SetTraining(true)
	}
	if err := run(m.eval); err != nil {
		return nil, err
	}
	return float32s(m.g.Logits.Value())
}

// Evaluate returns the mean cross-entropy (float64
// log-sum-exp of the float32 logits) and the accuracy on x, y, one
// example at a time.
func (e *Engine) Evaluate(x []float32, y []int) (loss, acc float64, err error) {
	return e.EvaluateContext(context.Background(), x, y)
}

// EvaluateContext is Evaluate, stopping with ctx's error between examples
// when ctx is done.
func (e *Engine) EvaluateContext(ctx context.Context, x []float32, y []int) (loss, acc float64, err error) {
	m := e.m
	chw := len(m.x)
	if len(y) == 0 || len(x) != len(y)*chw {
		return 0, 0, dpcore.Invalid("gorgoniadp", "evaluate: %d floats for %d examples of %d", len(x), len(y), chw)
	}
	if err := e.checkParams(); err != nil {
		return 0, 0, fmt.Errorf("gorgoniadp: evaluate: %w", err)
	}
	if e.fast != nil {
		return e.fastEvaluate(ctx, x, y)
	}
	sum, correct := 0.0, 0
	for i, c := range y {
		if c < 0 || c >= m.classes {
			return 0, 0, dpcore.Invalid("gorgoniadp", "evaluate: label %d of example %d not in [0,%d)", c, i, m.classes)
		}
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("gorgoniadp: evaluate: %w", err)
		}
		xi := x[i*chw : (i+1)*chw]
		if !allFinite(xi) {
			return 0, 0, dpcore.Invalid("gorgoniadp", "evaluate: example %d has a non-finite input", i)
		}
		lg, err := m.logits(xi)
		if err != nil {
			return 0, 0, fmt.Errorf("gorgoniadp: evaluate: example %d: %w", i, err)
		}
		l, pred := crossEntropyOf(lg, c)
		sum += l
		if pred == c {
			correct++
		}
	}
	return sum / float64(len(y)), float64(correct) / float64(len(y)), nil
}

// crossEntropyOf is the cross-entropy of one row of logits for label y
// (float64 log-sum-exp) and the row's argmax.
func crossEntropyOf(row []float32, y int) (float64, int) {
	mx, arg := math.Inf(-1), 0
	for j, v := range row {
		if float64(v) > mx {
			mx, arg = float64(v), j
		}
	}
	s := 0.0
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(s) - float64(row[y]), arg
}
