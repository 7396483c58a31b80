// Package clip computes clipped sums of per-example gradients, the one step
// of differentially private training a non-private framework lacks.
//
// An Engine runs ONE batched forward/backward pass of a models.Model with a
// loss summed over examples, keeps each affine layer's input U (for a
// convolution the im2col-unfolded input) and the gradient G of the loss
// w.r.t. the layer's pre-activation output, and forms from them
//
//   - each example's gradient norm: for a dense layer
//     ||g_i||^2 = ||u_i||^2 ||gz_i||^2 (+ ||gz_i||^2 for the bias); for a
//     convolution either ||U_i^T G_i||_F^2 with the per-example gradient
//     materialized, or the "ghost norm" <U_i U_i^T, G_i G_i^T>, whichever
//     costs fewer flops for that layer;
//   - the clipped sum sum_i c_i U_i^T G_i = U^T diag(c) G with one GEMM per
//     layer ("book-keeping", Bu et al. 2022), c_i = min(1, zeta/||g_i||);
//     where the per-example gradients were materialized for the norms, their
//     weighted sum (a matrix-vector product) replaces the GEMM.
//
// The engine's own GEMMs go through gonum's blas32 and gorgonia's through
// gorgonia.Use; UseBLAS32 installs a faster float32 BLAS in both.
//
// Batches of any size up to Options.MaxBatch are accepted (Poisson
// sampling): the graph is built for the size rounded up to a multiple of
// MaxBatch/8 (and rebuilt, in milliseconds, when that changes) and the
// rest of the batch is padded with zero-weight examples, which contribute
// nothing to the loss, the norms or the sum.
package clip

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/dpmf-go/dpmf/models"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrInvalid is returned (wrapped) for invalid options or inputs.
var ErrInvalid = errors.New("invalid argument")

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
	// 100*zeta). It forces per-example materialization of
	// convolution gradients and so costs time.
	LInfZero float64
	// NonPrivate sums gradients without clipping or computing per-example
	// norms (non-finite examples are still dropped), for comparison runs
	// through the same code. Norm, PerLayer and LInfZero are ignored.
	NonPrivate bool
	// MaxBatch is the largest batch ClippedSum, Evaluate and Predict are
	// called with; smaller batches are padded with zero-weight examples.
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
	m   models.Model
	opt Options

	// train is the forward+backward graph for the last batch size
	// rounded up to a multiple of quantum (capped at MaxBatch), so a
	// Poisson-sampled batch pays for at most quantum-1 padding examples.
	// Only one is kept: a graph holds on to its last run's values (about
	// two thirds of a step's memory), and rebuilding one costs
	// milliseconds against a step's hundreds.
	train   *pass
	quantum int
	last    *pass // the pass of the last ClippedSum

	chw     int
	classes int
	layers  []models.Layer
	ghost   []bool // per layer: norms via ghost identity

	// scratch
	sq     [][]float64 // per layer, per example squared norm
	linf   []float64
	bad    []bool    // per example: non-finite input
	norms  []float64 // last flat per-example norms (NaN for dropped)
	scale  [][]float32
	lossI  []float64
	perEx  [][]float32    // per materialized conv layer: MaxBatch x FanIn*FanOut
	grams  [][2][]float32 // per worker: two P x P Gram matrices
	colSum []float64      // FanOut scratch for bias sums
	sorted []float64
}

// pass is one compiled graph with its input buffers.
type pass struct {
	g      *gorgonia.ExprGraph
	net    *models.Net
	vm     gorgonia.VM
	x      []float32
	yw     []float32
	grads  gorgonia.Nodes
	loss   *gorgonia.Node
	xT, yT *tensor.Dense
}

// New builds the batched graphs for m. The model's parameter buffer is
// shared, not copied: later writes to m.Params() are seen by the engine.
func New(m models.Model, opt Options) (*Engine, error) {
	if m == nil {
		return nil, fmt.Errorf("clip: new: nil model: %w", ErrInvalid)
	}
	if opt.MaxBatch <= 0 {
		return nil, fmt.Errorf("clip: new: MaxBatch %d: %w", opt.MaxBatch, ErrInvalid)
	}
	if !opt.NonPrivate && len(opt.PerLayer) == 0 && !(opt.Norm > 0 && !math.IsInf(opt.Norm, 0)) {
		return nil, fmt.Errorf("clip: new: clipping norm %v must be positive and finite: %w", opt.Norm, ErrInvalid)
	}
	if opt.NonPrivate {
		opt.Norm, opt.PerLayer, opt.LInfZero = 0, nil, 0
	}
	if opt.LInfZero < 0 || math.IsNaN(opt.LInfZero) {
		return nil, fmt.Errorf("clip: new: LInfZero %v: %w", opt.LInfZero, ErrInvalid)
	}
	opt.PerLayer = slices.Clone(opt.PerLayer)
	in := m.InputShape()
	e := &Engine{m: m, opt: opt, chw: in[0] * in[1] * in[2], classes: m.Classes()}
	var err error
	e.quantum = (opt.MaxBatch + 7) / 8
	full, err := e.trainPass(opt.MaxBatch)
	if err != nil {
		return nil, fmt.Errorf("clip: new: %w", err)
	}
	e.layers = full.net.Layers
	if len(opt.PerLayer) > 0 && !opt.NonPrivate {
		if len(opt.PerLayer) != len(e.layers) {
			return nil, fmt.Errorf("clip: new: %d per-layer norms for %d layers: %w", len(opt.PerLayer), len(e.layers), ErrInvalid)
		}
		for _, v := range opt.PerLayer {
			if !(v > 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("clip: new: per-layer norm %v: %w", v, ErrInvalid)
			}
		}
	}
	B := opt.MaxBatch
	for _, L := range e.layers {
		e.sq = append(e.sq, make([]float64, B))
		e.scale = append(e.scale, make([]float32, B))
		g := L.Positions > 1 && opt.LInfZero == 0 && ghostCheaper(L)
		e.ghost = append(e.ghost, g)
		if L.FanOut > len(e.colSum) {
			e.colSum = make([]float64, L.FanOut)
		}
	}
	e.perEx = make([][]float32, len(e.layers))
	e.grams = make([][2][]float32, runtime.GOMAXPROCS(0))
	e.linf = make([]float64, B)
	e.bad = make([]bool, B)
	e.norms = make([]float64, B)
	e.lossI = make([]float64, B)
	return e, nil
}

// ghostCheaper compares the flops of materializing U_i^T G_i (P*FanIn*FanOut)
// with the two P x P Gram matrices of the ghost identity (P^2*(FanIn+FanOut)/2
// with symmetric rank-k updates, plus P^2 for the inner product).
func ghostCheaper(L models.Layer) bool {
	p := float64(L.Positions)
	mat := p * float64(L.FanIn) * float64(L.FanOut)
	ghost := p*p*float64(L.FanIn+L.FanOut)/2 + p*p
	return ghost < mat
}

// trainPass returns the forward+backward pass for n examples, building it
// if the last one has another size.
func (e *Engine) trainPass(n int) (*pass, error) {
	size := min((n+e.quantum-1)/e.quantum*e.quantum, e.opt.MaxBatch)
	if e.train == nil || e.train.net.Batch != size {
		if e.train != nil {
			// The old graph's values are garbage now; collecting them
			// before the new graph allocates its own keeps peak memory
			// at one graph's worth (a collection costs milliseconds:
			// the heap is mostly pointer-free float slices).
			e.train, e.last = nil, nil
			runtime.GC()
		}
		p, err := e.newPass(size, true)
		if err != nil {
			return nil, err
		}
		e.train = p
	}
	return e.train, nil
}

// evalPass builds a forward-only pass for Evaluate and Predict, which drop
// it when done so that its values do not stay live between evaluations.
func (e *Engine) evalPass() (*pass, error) {
	return e.newPass(e.opt.MaxBatch, false)
}

func (e *Engine) newPass(B int, backward bool) (*pass, error) {
	g := gorgonia.NewGraph()
	net, err := e.m.Build(g, B)
	if err != nil {
		return nil, err
	}
	p := &pass{g: g, net: net}
	in := e.m.InputShape()
	p.x = make([]float32, B*e.chw)
	p.xT = tensor.New(tensor.WithShape(B, in[0], in[1], in[2]), tensor.WithBacking(p.x))
	if err := gorgonia.Let(net.Input, p.xT); err != nil {
		return nil, err
	}
	if backward {
		p.yw = make([]float32, B*e.classes)
		p.yT = tensor.New(tensor.WithShape(B, e.classes), tensor.WithBacking(p.yw))
		yw := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(B, e.classes), gorgonia.WithName("yw"), gorgonia.WithValue(p.yT))
		ls, err := gorgonia.LogSoftMax(net.Logits)
		if err != nil {
			return nil, err
		}
		prod, err := gorgonia.HadamardProd(ls, yw)
		if err != nil {
			return nil, err
		}
		s, err := gorgonia.Sum(prod)
		if err != nil {
			return nil, err
		}
		// Summed (not averaged) loss: row i of each gradient is example
		// i's own gradient.
		if p.loss, err = gorgonia.Neg(s); err != nil {
			return nil, err
		}
		wrt := make(gorgonia.Nodes, len(net.Layers))
		for i, L := range net.Layers {
			wrt[i] = L.Probe
		}
		if p.grads, err = gorgonia.Grad(p.loss, wrt...); err != nil {
			return nil, fmt.Errorf("gradient graph: %w", err)
		}
	}
	// The tape machine reuses registers once a value is dead, so the
	// values read after the run (layer inputs, output gradients, logits)
	// are copied into their nodes as they are computed.
	watch := []any{net.Logits}
	outputs := gorgonia.Nodes{net.Logits}
	if backward {
		for i, L := range net.Layers {
			watch = append(watch, L.In, p.grads[i])
			outputs = append(outputs, L.In, p.grads[i])
		}
	}
	// Compile only what the outputs need: run as a whole graph, the tape
	// would also compute each weight's gradient that Grad's symbolic
	// differentiation of the matrix products adds, one unused GEMM per layer.
	prog, locs, err := gorgonia.CompileFunction(g, g.Inputs(), outputs)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	p.vm = gorgonia.NewTapeMachine(g, gorgonia.WithPrecompiled(prog, locs), gorgonia.TraceExec(), gorgonia.WithWatchlist(watch...))
	return p, nil
}

// load copies a batch into the pass's input buffers, zero-padding to
// MaxBatch, and checks it.
func (e *Engine) load(p *pass, x []float32, y []int, bad []bool) (int, error) {
	n := len(x) / e.chw
	if len(x) != n*e.chw || n == 0 {
		return 0, fmt.Errorf("len(x) = %d is not a positive multiple of %d: %w", len(x), e.chw, ErrInvalid)
	}
	if n > p.net.Batch {
		return 0, fmt.Errorf("batch %d > %d: %w", n, p.net.Batch, ErrInvalid)
	}
	if y != nil && len(y) != n {
		return 0, fmt.Errorf("%d labels for %d examples: %w", len(y), n, ErrInvalid)
	}
	for i, c := range y {
		if c < 0 || c >= e.classes {
			return 0, fmt.Errorf("label %d of example %d not in [0,%d): %w", c, i, e.classes, ErrInvalid)
		}
	}
	copy(p.x, x)
	clear(p.x[len(x):])
	if p.yw != nil {
		clear(p.yw)
		for i, c := range y {
			p.yw[i*e.classes+c] = 1
		}
	}
	// A NaN reaching gorgonia's max pool makes it index out of range in
	// a goroutine (an unrecoverable crash), so examples with non-finite
	// inputs are replaced by zeros here and reported as non-finite.
	if bad != nil {
		for i := range n {
			xi := p.x[i*e.chw : (i+1)*e.chw]
			bad[i] = false
			for _, v := range xi {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					bad[i] = true
					break
				}
			}
			if bad[i] {
				clear(xi)
				if p.yw != nil {
					clear(p.yw[i*e.classes : (i+1)*e.classes])
				}
			}
		}
	}
	return n, nil
}

// loadEval loads a forward-only batch, rejecting non-finite inputs.
func (e *Engine) loadEval(ev *pass, x []float32, y []int) error {
	if err := e.checkParams(); err != nil {
		return err
	}
	n, err := e.load(ev, x, y, e.bad)
	if err != nil {
		return err
	}
	for i := range n {
		if e.bad[i] {
			return fmt.Errorf("example %d has a non-finite input: %w", i, ErrInvalid)
		}
	}
	return nil
}

// checkParams rejects a model whose parameters are not all finite: one
// NaN weight poisons every example (and crashes gorgonia's max pool).
func (e *Engine) checkParams() error {
	for i, v := range e.m.Params() {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("parameter %d is %v: %w", i, v, ErrNonFiniteParams)
		}
	}
	return nil
}

func (p *pass) run() error {
	p.vm.Reset()
	if err := p.vm.RunAll(); err != nil {
		return fmt.Errorf("gorgonia run: %w", err)
	}
	return nil
}

func f32s(n *gorgonia.Node) []float32 {
	return n.Value().Data().([]float32)
}

// exampleLosses writes each example's cross-entropy (float64 log-sum-exp
// of the logits) into dst and returns its argmax predictions if pred != nil.
func (e *Engine) exampleLosses(logits []float32, y []int, dst []float64, pred []int) {
	C := e.classes
	for i := range dst {
		row := logits[i*C : (i+1)*C]
		mx := math.Inf(-1)
		arg := 0
		for j, v := range row {
			if float64(v) > mx {
				mx, arg = float64(v), j
			}
		}
		if pred != nil {
			pred[i] = arg
		}
		if y == nil {
			continue
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		dst[i] = mx + math.Log(s) - float64(row[y[i]])
	}
}

// ClippedSum runs one batched pass on the examples x (len(y) examples,
// each C*H*W floats in CHW order) with labels y, and writes into dst
// (len NumParams, aligned with the model's parameter buffer) the sum of
// the per-example gradients of the cross-entropy loss, each clipped as the
// Options say. dst is overwritten. Dropped examples (non-finite or
// LInfZero) contribute zero.
func (e *Engine) ClippedSum(x []float32, y []int, dst []float32) (Stats, error) {
	var st Stats
	if len(dst) != e.m.NumParams() {
		return st, fmt.Errorf("clip: clipped sum: len(dst) = %d, want %d: %w", len(dst), e.m.NumParams(), ErrInvalid)
	}
	if err := e.checkParams(); err != nil {
		return st, fmt.Errorf("clip: clipped sum: %w", err)
	}
	if len(y) == 0 || len(y) > e.opt.MaxBatch {
		return st, fmt.Errorf("clip: clipped sum: batch of %d not in [1, MaxBatch=%d]: %w", len(y), e.opt.MaxBatch, ErrInvalid)
	}
	p, err := e.trainPass(len(y))
	if err != nil {
		return st, fmt.Errorf("clip: clipped sum: %w", err)
	}
	e.last = p
	n, err := e.load(p, x, y, e.bad)
	if err != nil {
		return st, fmt.Errorf("clip: clipped sum: %w", err)
	}
	if err := p.run(); err != nil {
		return st, fmt.Errorf("clip: clipped sum: %w", err)
	}
	st.Examples = n
	lossI := e.lossI[:n]
	e.exampleLosses(f32s(p.net.Logits), y, lossI, nil)

	// Per-example, per-layer squared norms (and L-inf).
	linf := e.linf[:n]
	clear(linf)
	for l, L := range p.net.Layers {
		if e.opt.NonPrivate {
			e.finiteRows(l, L, f32s(L.In), f32s(p.grads[l]), n)
		} else {
			e.layerNorms(l, L, f32s(L.In), f32s(p.grads[l]), n)
		}
	}

	// Clip factors.
	norms := e.norms[:n]
	finite := 0
	lossSum := 0.0
	clipped := 0
	for i := range n {
		tot := 0.0
		for l := range e.layers {
			tot += e.sq[l][i]
		}
		nrm := math.Sqrt(tot)
		drop := false
		if e.bad[i] || math.IsNaN(nrm) || math.IsInf(nrm, 0) || math.IsNaN(lossI[i]) || math.IsInf(lossI[i], 0) {
			st.NonFinite++
			norms[i] = math.NaN()
			drop = true
		} else {
			finite++
			lossSum += lossI[i]
			norms[i] = nrm
			if e.opt.LInfZero > 0 && linf[i] > e.opt.LInfZero {
				st.Zeroed++
				drop = true
			}
		}
		wasClipped := false
		for l := range e.layers {
			c := 1.0
			switch {
			case drop:
				c = 0
			case e.opt.NonPrivate:
			case len(e.opt.PerLayer) > 0:
				if ln := math.Sqrt(e.sq[l][i]); ln > e.opt.PerLayer[l] {
					c = e.opt.PerLayer[l] / ln * shrink
					wasClipped = true
				}
			default:
				if nrm > e.opt.Norm {
					c = e.opt.Norm / nrm * shrink
					wasClipped = true
				}
			}
			e.scale[l][i] = float32(c)
		}
		if wasClipped {
			clipped++
		}
	}
	st.Clipped = float64(clipped) / float64(n)
	if finite > 0 {
		st.Loss = lossSum / float64(finite)
	}
	e.sorted = e.sorted[:0]
	for _, v := range norms {
		if !math.IsNaN(v) {
			e.sorted = append(e.sorted, v)
		}
	}
	slices.Sort(e.sorted)
	if k := len(e.sorted); k > 0 {
		for j, q := range []float64{0.5, 0.9, 0.99} {
			st.NormQuantiles[j] = e.sorted[min(k-1, int(math.Ceil(q*float64(k)))-1)]
		}
		st.NormQuantiles[3] = e.sorted[k-1]
	}

	// U^T diag(c) G per layer.
	for l, L := range p.net.Layers {
		e.layerSum(l, L, f32s(L.In), f32s(p.grads[l]), n, dst)
	}
	return st, nil
}

// shrink scales clip factors down by a relative 1e-6 so that float32
// rounding in the products cannot lift a clipped gradient above its
// threshold: sensitivity bounds must hold exactly.
const shrink = 1 - 1e-6

func sqnorm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return s
}

func maxabs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		a := math.Abs(float64(x))
		if a > m || a != a {
			m = a
		}
	}
	return m
}

// layerNorms fills e.sq[l][:n] and raises e.linf[:n].
func (e *Engine) layerNorms(l int, L models.Layer, U, G []float32, n int) {
	P, fi, fo := L.Positions, L.FanIn, L.FanOut
	sq := e.sq[l]
	if P == 1 {
		for i := range n {
			u, g := U[i*fi:(i+1)*fi], G[i*fo:(i+1)*fo]
			gg := sqnorm(g)
			sq[i] = sqnorm(u)*gg + gg
			if e.opt.LInfZero > 0 {
				mg := maxabs(g)
				e.linf[i] = max(e.linf[i], maxabs(u)*mg, mg)
			}
		}
		return
	}
	if !e.ghost[l] && e.perEx[l] == nil {
		e.perEx[l] = make([]float32, e.opt.MaxBatch*fi*fo)
	}
	e.parallel(n, func(w, i int) {
		Ui := blas32.General{Rows: P, Cols: fi, Stride: fi, Data: U[i*P*fi : (i+1)*P*fi]}
		Gi := blas32.General{Rows: P, Cols: fo, Stride: fo, Data: G[i*P*fo : (i+1)*P*fo]}
		// Bias gradient: column sums of G_i.
		bsq, bmax := 0.0, 0.0
		for k := range fo {
			s := 0.0
			for r := range P {
				s += float64(Gi.Data[r*fo+k])
			}
			bsq += s * s
			bmax = max(bmax, math.Abs(s))
			if s != s {
				bmax = s
			}
		}
		if e.ghost[l] {
			gr := &e.grams[w]
			if len(gr[0]) < P*P {
				gr[0], gr[1] = make([]float32, P*P), make([]float32, P*P)
			}
			A := blas32.Symmetric{N: P, Stride: P, Uplo: blas.Upper, Data: gr[0][:P*P]}
			Bm := blas32.Symmetric{N: P, Stride: P, Uplo: blas.Upper, Data: gr[1][:P*P]}
			blas32.Syrk(blas.NoTrans, 1, Ui, 0, A)
			blas32.Syrk(blas.NoTrans, 1, Gi, 0, Bm)
			s := 0.0
			for r := range P {
				ra, rb := A.Data[r*P:(r+1)*P], Bm.Data[r*P:(r+1)*P]
				s += float64(ra[r]) * float64(rb[r])
				t := 0.0
				for c := r + 1; c < P; c++ {
					t += float64(ra[c]) * float64(rb[c])
				}
				s += 2 * t
			}
			sq[i] = s + bsq
			return
		}
		// Materialized: kept for the clipped sum, which is then a
		// weighted sum of these rather than a second GEMM.
		M := blas32.General{Rows: fi, Cols: fo, Stride: fo, Data: e.perEx[l][i*fi*fo : (i+1)*fi*fo]}
		blas32.Gemm(blas.Trans, blas.NoTrans, 1, Ui, Gi, 0, M)
		sq[i] = sqnorm(M.Data) + bsq
		if e.opt.LInfZero > 0 {
			e.linf[i] = max(e.linf[i], maxabs(M.Data), bmax)
		}
	})
}

// parallel calls f(worker, i) for i in [0, n) on up to GOMAXPROCS
// goroutines; calls with the same worker index never overlap.
func (e *Engine) parallel(n int, f func(w, i int)) {
	nw := min(len(e.grams), n)
	if nw <= 1 {
		for i := range n {
			f(0, i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += nw {
				f(w, i)
			}
		}()
	}
	wg.Wait()
}

// finiteRows sets e.sq[l][i] to 0, or NaN when example i's rows of U or G
// hold a non-finite value: the non-private path needs no norms, only the
// guarantee that no NaN or Inf reaches the sum.
func (e *Engine) finiteRows(l int, L models.Layer, U, G []float32, n int) {
	P, fi, fo := L.Positions, L.FanIn, L.FanOut
	for i := range n {
		e.sq[l][i] = 0
		if !allFinite(U[i*P*fi:(i+1)*P*fi]) || !allFinite(G[i*P*fo:(i+1)*P*fo]) {
			e.sq[l][i] = math.NaN()
		}
	}
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}

// layerSum writes U^T diag(c) G and the column sums of diag(c) G into the
// layer's weight and bias ranges of dst. It scales G and zeroes dropped
// examples' rows of U in place: both are scratch values of this pass.
func (e *Engine) layerSum(l int, L models.Layer, U, G []float32, n int, dst []float32) {
	P, fi, fo := L.Positions, L.FanIn, L.FanOut
	c := e.scale[l]
	for i := range n {
		g := G[i*P*fo : (i+1)*P*fo]
		switch c[i] {
		case 1:
		case 0:
			// 0*NaN is NaN: clear the rows rather than scale them.
			clear(g)
			clear(U[i*P*fi : (i+1)*P*fi])
		default:
			for k := range g {
				g[k] *= c[i]
			}
		}
	}
	rows := n * P
	W := blas32.General{Rows: fi, Cols: fo, Stride: fo, Data: dst[L.Weight.Offset : L.Weight.Offset+L.Weight.Len]}
	if P > 1 && !e.ghost[l] && !e.opt.NonPrivate {
		// sum_i c_i M_i with the per-example gradients M_i kept by
		// layerNorms: M^T c for the n x (fi*fo) matrix M.
		K := fi * fo
		M := e.perEx[l][:n*K]
		for i := range n {
			if c[i] == 0 {
				clear(M[i*K : (i+1)*K])
			}
		}
		blas32.Gemv(blas.Trans, 1, blas32.General{Rows: n, Cols: K, Stride: K, Data: M},
			blas32.Vector{N: n, Inc: 1, Data: c[:n]}, 0, blas32.Vector{N: K, Inc: 1, Data: W.Data})
	} else {
		Um := blas32.General{Rows: rows, Cols: fi, Stride: fi, Data: U[:rows*fi]}
		Gm := blas32.General{Rows: rows, Cols: fo, Stride: fo, Data: G[:rows*fo]}
		blas32.Gemm(blas.Trans, blas.NoTrans, 1, Um, Gm, 0, W)
	}
	b := dst[L.Bias.Offset : L.Bias.Offset+L.Bias.Len]
	acc := e.colSum[:fo]
	clear(acc)
	for r := range rows {
		for k, v := range G[r*fo : (r+1)*fo] {
			acc[k] += float64(v)
		}
	}
	for k := range b {
		b[k] = float32(acc[k])
	}
}

// Evaluate returns the mean cross-entropy and the accuracy of the model on
// the examples x with labels y, in forward-only batches of MaxBatch.
func (e *Engine) Evaluate(x []float32, y []int) (loss, acc float64, err error) {
	return e.EvaluateContext(context.Background(), x, y)
}

// EvaluateContext is Evaluate, stopping between batches when ctx is done.
func (e *Engine) EvaluateContext(ctx context.Context, x []float32, y []int) (loss, acc float64, err error) {
	if len(y) == 0 || len(x) != len(y)*e.chw {
		return 0, 0, fmt.Errorf("clip: evaluate: %d floats for %d examples of %d: %w", len(x), len(y), e.chw, ErrInvalid)
	}
	B := e.opt.MaxBatch
	ev, err := e.evalPass()
	if err != nil {
		return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
	}
	pred := make([]int, B)
	losses := make([]float64, B)
	sum, correct := 0.0, 0
	for s := 0; s < len(y); s += B {
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
		}
		t := min(s+B, len(y))
		if err := e.loadEval(ev, x[s*e.chw:t*e.chw], y[s:t]); err != nil {
			return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
		}
		if err := ev.run(); err != nil {
			return 0, 0, fmt.Errorf("clip: evaluate: %w", err)
		}
		k := t - s
		e.exampleLosses(f32s(ev.net.Logits), y[s:t], losses[:k], pred[:k])
		for i := range k {
			sum += losses[i]
			if pred[i] == y[s+i] {
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
		return nil, fmt.Errorf("clip: predict: len(x) = %d is not a positive multiple of %d: %w", len(x), e.chw, ErrInvalid)
	}
	B := e.opt.MaxBatch
	ev, err := e.evalPass()
	if err != nil {
		return nil, fmt.Errorf("clip: predict: %w", err)
	}
	out := make([]int, n)
	for s := 0; s < n; s += B {
		t := min(s+B, n)
		if err := e.loadEval(ev, x[s*e.chw:t*e.chw], nil); err != nil {
			return nil, fmt.Errorf("clip: predict: %w", err)
		}
		if err := ev.run(); err != nil {
			return nil, fmt.Errorf("clip: predict: %w", err)
		}
		e.exampleLosses(f32s(ev.net.Logits), nil, make([]float64, t-s), out[s:t])
	}
	return out, nil
}
