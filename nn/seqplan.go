package nn

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/dpcore"
	gblas "gonum.org/v1/gonum/blas"
)

// SeqPlan runs a Transformer: forward, backward, each example's gradient
// norms and the clipped gradient sum, with every buffer allocated once.
// Examples are independent (attention stays inside an example), so a
// step deals whole examples to its workers (example i to worker i mod
// W), each runs its examples one at a time over their L real tokens
// (padding is never computed), and the workers' sums are added in worker
// order: the result does not depend on scheduling.
//
// Per-example gradients: LayerNorm, embedding, bias and adapter gradients
// are materialized (they are small); a weight W applied over the
// sequence, whose per-example gradient is X^T G for the example's inputs
// X (L x in) and output gradients G (L x out), is either materialized or
// has its norm computed from the Gram matrices,
// ||X^T G||_F^2 = sum_{s,t} (X X^T)_{st} (G G^T)_{st} (the ghost norm, Li
// et al. 2021), whichever costs less (mixed ghost clipping, Bu et al.
// 2022; ghostPays: the ghost norm for short contexts and wide layers,
// and beyond a memory budget per worker). A
// ghost layer's clipped contribution is then X^T (f G) for the example's
// factor f, the book-keeping of Bu et al. Gram matrices are formed and
// summed in float64, and the norm the clipper sees is the bound of
// recompute.go's ghost convolutions (ghostBound): f G rounded is not a
// multiple of G, which under cancellation matters against ‖X^T G‖.
type SeqPlan struct {
	t       Transformer
	params  []float32
	opt     Options
	pieces  []piece // materialized per-example gradient ranges
	ghosts  []ghostW
	units   int
	exLen   int
	exOf    map[int]int // parameter offset -> ex offset of materialized pieces
	train   []Param     // ranges that receive gradients
	sinus   []float32
	loss    []float64
	workers []*seqWorker
	// The weights packed once per call for the products (blas.PackB32),
	// shared by the workers: per linear, W for the forward product and
	// W^T for the input gradient; the tied output matrix the same.
	pk         []seqPacked
	wteF, wteB blas.PackedB32

	// per call
	x      []float32
	y      []int
	n      int
	clip   Clipper
	ctx    context.Context
	mode   mode
	out    [][]float32
	logits []float32
	last   bool // forward: the last real position's logits only
	// lossOnly: Losses, the forward pass and the loss without gradients
	lossOnly bool
}

// seqPacked is a linear's weight packed for both products.
type seqPacked struct{ f, b blas.PackedB32 }

// piece is a parameter range whose per-example gradient is materialized
// at ex[off:off+p.Len], counted in unit.
type piece struct {
	p         Param
	off, unit int
}

// ghostW is a weight whose per-example norm is the ghost norm.
type ghostW struct {
	w       Param
	in, out int
	unit    int
}

// linear refers to one Linear of the model with its compiled choices.
type seqLinear struct {
	l         Linear
	in, out   int
	wEx, bEx  int // ex offsets of the materialized weight, bias (-1: none)
	aEx, bbEx int // adapter A, B
	ghost     int // index in ghosts, -1
	trainW    bool
	trainA    bool
}

type seqWorker struct {
	lin    []seqLinear // per block: attn, proj, fc, fc2; then the head
	gemm   blas.Serial32
	gemm64 blas.Serial64
	ids    []int
	gX     [][]float32 // per ghost: the inputs of the current example
	// activations, Context rows each
	h0                []float32
	xh1, xh2, a1, a2  [][]float32 // per block
	r1, r2            [][]float64
	in, mid, att, qkv [][]float32
	z, f, th          [][]float32 // pre-GELU, GELU, the tanh of its approximation
	p                 [][]float32 // per block, Heads x L x L
	u                 [][]float32 // per linear: x A (Context x rank)
	xhF, hf           []float32
	rF, r0            []float64
	xh0               []float32
	logits            []float32 // Context x Vocab or Classes (dbig's start)
	// gradients
	dh, dh2, da, dbig, dqkv, dp []float32
	v                           []float32   // G B^T
	g                           [][]float32 // per ghost: the output gradient kept
	ex                          []float32
	sq                          []float64
	c                           []float64
	acc                         []float32
	xd, gd, gx, gg              []float64
	gr                          []float64 // per ghost: its factor's reduction (ghostBound)
	nacc                        []float64
	log                         *productLog // while RecordProducts is on
}

// NewSeqPlan compiles t over the parameter buffer params (shared, not
// copied). Options are as for NewPlan (Chunk is not used: a worker runs
// one example at a time).
func NewSeqPlan(t Transformer, params []float32, opt Options) (*SeqPlan, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("nn: %w", err)
	}
	for _, q := range t.params() {
		if q.Offset < 0 || q.Offset+q.Len > len(params) {
			return nil, dpcore.Invalid("nn", "plan: transformer parameters [%d, %d) outside the buffer of %d", q.Offset, q.Offset+q.Len, len(params))
		}
	}
	if opt.MaxBatch <= 0 || opt.Workers < 0 {
		return nil, dpcore.Invalid("nn", "plan: MaxBatch %d, %d workers", opt.MaxBatch, opt.Workers)
	}
	if opt.Workers == 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	t.Blocks = append([]TransformerBlock(nil), t.Blocks...)
	p := &SeqPlan{t: t, params: params, opt: opt, loss: make([]float64, opt.MaxBatch), exOf: map[int]int{}}
	base := !t.FreezeBase
	mat := func(q Param, unit int) int {
		if q.Len == 0 {
			return -1
		}
		off := p.exLen
		p.exOf[q.Offset] = off
		p.pieces = append(p.pieces, piece{q, off, unit})
		p.train = append(p.train, q)
		p.exLen += q.Len
		return off
	}
	if base {
		u := p.units
		p.units++
		mat(t.Wte, u)
		if t.Wpe.Len > 0 {
			mat(t.Wpe, p.units)
			p.units++
		}
	}
	var lins []seqLinear
	matW := 0 // weight entries materialized so far
	addLin := func(l Linear, in, out int, head bool) {
		s := seqLinear{l: l, in: in, out: out, wEx: -1, bEx: -1, aEx: -1, bbEx: -1, ghost: -1}
		s.trainW = l.Weight.Len > 0 && (base || head)
		s.trainA = l.LoRAA.Len > 0
		if s.trainW || s.trainA {
			u := p.units
			p.units++
			if s.trainW {
				if p.ghostPays(in, out, matW) {
					s.ghost = len(p.ghosts)
					p.ghosts = append(p.ghosts, ghostW{l.Weight, in, out, u})
					p.train = append(p.train, l.Weight)
				} else {
					s.wEx = mat(l.Weight, u)
					matW += in * out
				}
				s.bEx = mat(l.Bias, u)
			}
			if s.trainA {
				s.aEx, s.bbEx = mat(l.LoRAA, u), mat(l.LoRAB, u)
			}
		}
		lins = append(lins, s)
	}
	normUnit := func(n Norm) {
		if base {
			mat(n.Weight, p.units)
			mat(n.Bias, p.units)
			p.units++
		}
	}
	if t.PostNorm {
		normUnit(t.Final)
	}
	for _, b := range t.Blocks {
		normUnit(b.Ln1)
		addLin(b.Attn, t.Dim, 3*t.Dim, false)
		addLin(b.Proj, t.Dim, t.Dim, false)
		normUnit(b.Ln2)
		addLin(b.FC, t.Dim, t.Hidden, false)
		addLin(b.FC2, t.Hidden, t.Dim, false)
	}
	if !t.PostNorm {
		normUnit(t.Final)
	}
	if t.Classes > 0 {
		addLin(t.Head, t.Dim, t.Classes, true)
	} else if t.Head.Weight.Len > 0 {
		addLin(t.Head, t.Dim, t.Vocab, false)
	}
	if p.units == 0 {
		return nil, dpcore.Invalid("nn", "plan: the transformer has nothing to train (a frozen base without adapters or head)")
	}
	if t.Positions == SinusoidalPositions {
		p.sinus = make([]float32, t.Context*t.Dim)
		for pos := range t.Context {
			for k := 0; k < t.Dim; k += 2 {
				a := float64(pos) / math.Pow(10000, float64(k)/float64(t.Dim))
				p.sinus[pos*t.Dim+k] = float32(math.Sin(a))
				if k+1 < t.Dim {
					p.sinus[pos*t.Dim+k+1] = float32(math.Cos(a))
				}
			}
		}
	}
	if need := p.workerBytes() * int64(opt.Workers); need > maxPlanBytes {
		return nil, dpcore.Invalid("nn", "plan: buffers need %.1f GiB for %d workers (limit %d GiB)", float64(need)/(1<<30), opt.Workers, maxPlanBytes>>30)
	}
	for range opt.Workers {
		p.workers = append(p.workers, p.newWorker(lins))
	}
	p.pk = make([]seqPacked, len(lins))
	return p, nil
}

// Ghost norms against materialized per-example gradients, per weight
// (in x out) over sequences of up to T tokens: the ghost norm costs two
// Gram matrices, 2 T^2 (in + out) multiply-adds in float64, and the
// clipped sum one product X^T (f G); materializing costs the same product
// (X^T G) and three passes over in x out entries (write, norm, scaled
// add), and their memory. With a float64 product near 70 GFLOP/s and a
// pass near 3 floats a nanosecond (AVX-512 cores), the ghost norm pays
// when ghostRatio in x out >= T^2 (in + out), ghostRatio about 17: short
// sequences, wide layers. Materialized weights are bounded per worker
// (matBudget entries, 64 MiB); beyond it a weight gets the ghost norm
// when that needs less memory (2 T^2 < in x out), as before costs were
// weighed.
const (
	ghostRatio = 17
	matBudget  = 16 << 20
)

// ghostPays reports whether a trained weight in x out gets the ghost norm,
// given matW weight entries already materialized.
func (p *SeqPlan) ghostPays(in, out, matW int) bool {
	switch p.opt.seqNorms {
	case normsAllGhost:
		return true
	case normsAllMaterialized:
		return false
	}
	T := int64(p.t.Context)
	switch {
	case ghostRatio*int64(in)*int64(out) >= T*T*int64(in+out):
		return true // cheaper
	case matW+in*out <= matBudget:
		return false
	}
	// Beyond the budget, the ghost norm where it needs less memory.
	return 2*T*T < int64(in)*int64(out)
}

func (p *SeqPlan) outWidth() int {
	if p.t.Classes > 0 {
		return p.t.Classes
	}
	return p.t.Vocab
}

// workerBytes bounds one worker's buffers.
func (p *SeqPlan) workerBytes() int64 {
	t := &p.t
	T, D, B := int64(t.Context), int64(t.Dim), int64(len(t.Blocks))
	f := B*(T*D*8+T*3*D*2+T*int64(t.Hidden)*3+int64(t.Heads)*T*T) + T*int64(p.outWidth()) + T*(4*D+int64(t.Hidden)) + T*T*2
	f += int64(p.exLen) + int64(len(p.params))
	for _, g := range p.ghosts {
		f += T * int64(g.out)
	}
	return 4*f + 8*4*T*max(int64(t.Hidden), 3*D, T)
}

func (p *SeqPlan) newWorker(lins []seqLinear) *seqWorker {
	t := &p.t
	T, D, B, H := t.Context, t.Dim, len(t.Blocks), t.Hidden
	mk := func(n int) [][]float32 {
		out := make([][]float32, B)
		for i := range out {
			out[i] = make([]float32, n)
		}
		return out
	}
	mk64 := func(n int) [][]float64 {
		out := make([][]float64, B)
		for i := range out {
			out[i] = make([]float64, n)
		}
		return out
	}
	w := &seqWorker{lin: append([]seqLinear(nil), lins...), ids: make([]int, T),
		h0: make([]float32, T*D), xh0: make([]float32, T*D), r0: make([]float64, T),
		xh1: mk(T * D), xh2: mk(T * D), a1: mk(T * D), a2: mk(T * D), r1: mk64(T), r2: mk64(T),
		in: mk(T * D), mid: mk(T * D), att: mk(T * D), qkv: mk(3 * T * D), z: mk(T * H), f: mk(T * H), th: mk(T * H),
		p: mk(t.Heads * T * T), xhF: make([]float32, T*D), hf: make([]float32, T*D), rF: make([]float64, T),
		dh: make([]float32, T*D), dh2: make([]float32, T*D), da: make([]float32, T*D),
		dbig: make([]float32, T*max(H, p.outWidth(), 3*D)), dqkv: make([]float32, 3*T*D), dp: make([]float32, T*T),
		v: make([]float32, T*max(t.LoRARank, 1)), ex: make([]float32, p.exLen),
		sq: make([]float64, p.units), c: make([]float64, p.units), acc: make([]float32, len(p.params)),
		nacc: make([]float64, max(3*D, H, p.outWidth())),
	}
	// The logits' gradient overwrites them (lossGrad).
	w.logits = w.dbig[:T*p.outWidth()]
	for range w.lin {
		w.u = append(w.u, make([]float32, T*max(t.LoRARank, 1)))
	}
	for _, g := range p.ghosts {
		w.g = append(w.g, make([]float32, T*g.out))
	}
	w.gX = make([][]float32, len(p.ghosts))
	if len(p.ghosts) > 0 {
		mx := 0
		for _, g := range p.ghosts {
			mx = max(mx, g.in, g.out)
		}
		w.xd, w.gd, w.gx, w.gg = make([]float64, T*mx), make([]float64, T*mx), make([]float64, T*T), make([]float64, T*T)
		w.gr = make([]float64, len(p.ghosts))
	}
	return w
}

// Affine is the number of gradient groups Clipper.Scale sees: one per
// trained embedding table, LayerNorm, linear layer (weight, bias and
// adapter together) or adapter of a frozen layer, in network order.
func (p *SeqPlan) Affine() int { return p.units }

// Trainable lists the parameter ranges that receive gradients (with
// FreezeBase, the adapters and a classification head): the ranges a
// trainer must add noise to and update; every other entry of a step's
// sum is zero and needs no noise, since no example's gradient touches it.
func (p *SeqPlan) Trainable() []Param { return append([]Param(nil), p.train...) }

// Outputs is the length of one example's output (Transformer.Outputs).
func (p *SeqPlan) Outputs() int { return p.t.Outputs() }

// Ghost is the number of weights whose per-example norms are ghost norms.
func (p *SeqPlan) Ghost() int { return len(p.ghosts) }

// check validates a batch: ids are integers in [0, Vocab) or -1, padding
// is a suffix after at least one token, labels are classes.
func (p *SeqPlan) check(x []float32, y []int, n int) error {
	T := p.t.Context
	if n > p.opt.MaxBatch || len(x) != n*T {
		return dpcore.Invalid("nn", "%d input values for %d examples of %d tokens (at most %d examples)", len(x), n, T, p.opt.MaxBatch)
	}
	return p.checkRows(x, y)
}

// CheckInputs checks examples x (Context ids each, any number of them) as
// Step would, labels aside: a trainer refuses a whole data set before the
// run rather than fail at the step that samples a bad example.
func (p *SeqPlan) CheckInputs(x []float32) error {
	if len(x)%p.t.Context != 0 {
		return dpcore.Invalid("nn", "%d input values are not examples of %d tokens", len(x), p.t.Context)
	}
	return p.checkRows(x, nil)
}

// checkRows checks every example of x and, when y is not nil, its label.
func (p *SeqPlan) checkRows(x []float32, y []int) error {
	T := p.t.Context
	for i := range len(x) / T {
		row := x[i*T : (i+1)*T]
		pad := false
		for k, v := range row {
			switch {
			case v == -1:
				if k == 0 {
					return dpcore.Invalid("nn", "example %d has no token (it starts with padding -1)", i)
				}
				pad = true
			case pad:
				return dpcore.Invalid("nn", "example %d: token %v at position %d after padding (-1 must only end a sequence)", i, v, k)
			case v != float32(math.Trunc(float64(v))) || v < 0 || int(v) >= p.t.Vocab:
				return dpcore.Invalid("nn", "example %d position %d: id %v is not an integer in [0, %d) or -1", i, k, v, p.t.Vocab)
			}
		}
		if y != nil && p.t.Classes > 0 && (y[i] < 0 || y[i] >= p.t.Classes) {
			return dpcore.Invalid("nn", "label %d of example %d not in [0,%d)", y[i], i, p.t.Classes)
		}
	}
	return nil
}

// Step runs the forward and backward pass on the examples x (Context ids
// each) with labels y (ignored by a language model, but len(y) is the
// number of examples) and writes into dst (len(params)) the sum of their
// gradients: unclipped if clip is nil, else each example's groups scaled
// by the factors clip returns (Clipper, as for Plan.Step). Entries of
// frozen parameters are zero. Examples whose loss or gradient is not
// finite contribute nothing (clip sees NaN norms). It returns each
// example's loss, valid until the next call.
func (p *SeqPlan) Step(x []float32, y []int, dst []float32, clip Clipper) ([]float64, error) {
	return p.StepContext(context.Background(), x, y, dst, clip)
}

// StepContext is Step, stopping between examples when ctx is done (it
// then returns ctx's error).
func (p *SeqPlan) StepContext(ctx context.Context, x []float32, y []int, dst []float32, clip Clipper) ([]float64, error) {
	if err := checkStep(p.check, x, y, dst, len(p.params)); err != nil {
		return nil, err
	}
	if clip == nil {
		clip = unit{}
	}
	p.x, p.y, p.n, p.clip, p.ctx, p.mode = x, y, len(y), clip, ctx, modeTrain
	p.run()
	p.sum(dst)
	p.x, p.y, p.clip, p.ctx = nil, nil, nil, nil
	if ctx.Err() != nil {
		return nil, fmt.Errorf("nn: step: %w", ctx.Err())
	}
	return p.loss[:len(y)], nil
}

// sum writes the workers' sums, added in worker order, into dst (zero
// outside the trained ranges), each trained range split between as many
// goroutines as workers.
func (p *SeqPlan) sum(dst []float32) {
	W := len(p.workers)
	var wg sync.WaitGroup
	for part := range W {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clear(dst[len(dst)*part/W : len(dst)*(part+1)/W])
		}()
	}
	wg.Wait()
	for part := range W {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, q := range p.train {
				lo, hi := q.Offset+q.Len*part/W, q.Offset+q.Len*(part+1)/W
				d := dst[lo:hi]
				for _, w := range p.workers {
					add(d, w.acc[lo:hi])
				}
			}
		}()
	}
	wg.Wait()
}

// Gradients writes each example's unclipped gradient into out[i]
// (len(params) each, zero for frozen parameters), for tests and audits;
// it returns the losses as Step.
func (p *SeqPlan) Gradients(x []float32, y []int, out [][]float32) ([]float64, error) {
	if err := p.check(x, y, len(y)); err != nil {
		return nil, err
	}
	if err := checkOutputs(out, len(y), len(p.params)); err != nil {
		return nil, err
	}
	p.x, p.y, p.n, p.clip, p.ctx, p.mode, p.out = x, y, len(y), unit{}, context.Background(), modeGradients, out
	p.run()
	p.x, p.y, p.clip, p.out = nil, nil, nil, nil
	return p.loss[:len(y)], nil
}

// Norms returns each example's squared gradient norm per group (Affine
// entries per example, as Clipper.Scale receives them) and the losses.
func (p *SeqPlan) Norms(x []float32, y []int) ([][]float64, []float64, error) {
	rec := &recorder{sq: make([][]float64, len(y))}
	dst := make([]float32, len(p.params))
	loss, err := p.Step(x, y, dst, rec)
	return rec.sq, loss, err
}

type recorder struct {
	mu sync.Mutex
	sq [][]float64
}

func (r *recorder) Scale(i int, sq []float64, _ float64, c []float64) {
	r.mu.Lock()
	r.sq[i] = append([]float64(nil), sq...)
	r.mu.Unlock()
	for k := range c {
		c[k] = 1
	}
}

// Forward writes the outputs of the examples x into logits (Outputs()
// per example): for a language model the Context x Vocab logits, zero at
// padding positions; for a classifier the class logits.
func (p *SeqPlan) Forward(x []float32, logits []float32) error {
	n := len(x) / p.t.Context
	if len(x) != n*p.t.Context || len(logits) != n*p.Outputs() {
		return dpcore.Invalid("nn", "forward: %d inputs, %d logits for examples of %d tokens and %d outputs", len(x), len(logits), p.t.Context, p.Outputs())
	}
	for i0 := 0; i0 < n; i0 += p.opt.MaxBatch {
		m := min(p.opt.MaxBatch, n-i0)
		if err := p.check(x[i0*p.t.Context:(i0+m)*p.t.Context], nil, m); err != nil {
			return err
		}
		p.x, p.y, p.n, p.ctx, p.mode, p.logits = x[i0*p.t.Context:(i0+m)*p.t.Context], nil, m, context.Background(), modeForward, logits[i0*p.Outputs():(i0+m)*p.Outputs()]
		p.run()
	}
	p.x, p.logits = nil, nil
	return nil
}

// Losses returns each example's loss as Step would (a language model's
// mean cross-entropy over the L-1 predicted tokens of an example of L,
// a classifier's cross-entropy against y) from the forward pass alone,
// for evaluation: perplexity over a split is exp(sum_i loss_i (L_i - 1) /
// sum_i (L_i - 1)). At most MaxBatch examples; valid until the next call.
func (p *SeqPlan) Losses(x []float32, y []int) ([]float64, error) {
	if err := p.check(x, y, len(y)); err != nil {
		return nil, err
	}
	p.x, p.y, p.n, p.clip, p.ctx, p.mode, p.lossOnly = x, y, len(y), unit{}, context.Background(), modeTrain, true
	p.run()
	p.x, p.y, p.clip, p.lossOnly = nil, nil, nil, false
	return p.loss[:len(y)], nil
}

// LastLogits writes, for each example of x, the logits at its last real
// token: Vocab next-token logits for a language model, the class logits
// for a classifier (Forward's), so that predicting the next token costs
// one row of the output layer.
func (p *SeqPlan) LastLogits(x []float32, logits []float32) error {
	k := p.outWidth()
	n := len(x) / p.t.Context
	if len(x) != n*p.t.Context || len(logits) != n*k {
		return dpcore.Invalid("nn", "last logits: %d inputs, %d logits for examples of %d tokens and %d outputs", len(x), len(logits), p.t.Context, k)
	}
	p.last = true
	defer func() { p.last = false }()
	for i0 := 0; i0 < n; i0 += p.opt.MaxBatch {
		m := min(p.opt.MaxBatch, n-i0)
		xs := x[i0*p.t.Context : (i0+m)*p.t.Context]
		if err := p.check(xs, nil, m); err != nil {
			return err
		}
		p.x, p.y, p.n, p.ctx, p.mode, p.logits = xs, nil, m, context.Background(), modeForward, logits[i0*k:(i0+m)*k]
		p.run()
	}
	p.x, p.logits = nil, nil
	return nil
}

func (p *SeqPlan) run() {
	p.pack()
	W := min(len(p.workers), p.n)
	var wg sync.WaitGroup
	for wi := range W {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.work(wi, W)
		}()
	}
	wg.Wait()
	if W < len(p.workers) && p.mode == modeTrain {
		for _, w := range p.workers[W:] {
			for _, q := range p.train {
				clear(w.acc[q.Offset : q.Offset+q.Len])
			}
		}
	}
}

// pack packs the weights the call's products use (the forward ones, and
// for a backward pass the transposed ones too), the packings dealt to
// every worker's goroutine so that all cores work. A last-position
// forward (LastLogits) multiplies one row per example by the output
// matrix and leaves it unpacked.
func (p *SeqPlan) pack() {
	t := &p.t
	back := p.mode == modeGradients || (p.mode == modeTrain && !p.lossOnly)
	var jobs []func()
	for li := range p.pk {
		l, pk := p.workers[0].lin[li], &p.pk[li]
		W := p.params[l.l.Weight.Offset : l.l.Weight.Offset+l.l.Weight.Len]
		jobs = append(jobs, func() { blas.PackB32(gblas.NoTrans, l.in, l.out, 1, W, l.out, &pk.f) })
		if back {
			jobs = append(jobs, func() { blas.PackB32(gblas.Trans, l.out, l.in, 1, W, l.out, &pk.b) })
		}
	}
	if t.Classes == 0 && t.Head.Weight.Len == 0 {
		wte := p.params[t.Wte.Offset : t.Wte.Offset+t.Wte.Len]
		if !p.last {
			jobs = append(jobs, func() { blas.PackB32(gblas.Trans, t.Dim, t.Vocab, 1, wte, t.Dim, &p.wteF) })
		}
		if back {
			jobs = append(jobs, func() { blas.PackB32(gblas.NoTrans, t.Vocab, t.Dim, 1, wte, t.Dim, &p.wteB) })
		}
	}
	// The largest first, dealt in turn.
	W := len(p.workers)
	var wg sync.WaitGroup
	for wi := range W {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := len(jobs) - 1 - wi; k >= 0; k -= W {
				jobs[k]()
			}
		}()
	}
	wg.Wait()
}

func (p *SeqPlan) work(wi, W int) {
	w := p.workers[wi]
	for _, q := range p.train {
		clear(w.acc[q.Offset : q.Offset+q.Len])
	}
	T := p.t.Context
	for i := wi; i < p.n; i += W {
		if p.ctx.Err() != nil {
			return
		}
		L := 0
		for _, v := range p.x[i*T : (i+1)*T] {
			if v == -1 {
				break
			}
			w.ids[L] = int(v)
			L++
		}
		label := 0
		if p.y != nil {
			label = p.y[i]
		}
		p.forward(w, L)
		if p.mode == modeForward {
			if p.last {
				k := p.outWidth()
				copy(p.logits[i*k:(i+1)*k], w.logits[:k])
				continue
			}
			o := p.logits[i*p.Outputs() : (i+1)*p.Outputs()]
			clear(o)
			if p.t.Classes > 0 {
				copy(o, w.logits[:p.t.Classes])
			} else {
				copy(o, w.logits[:L*p.t.Vocab])
			}
			continue
		}
		loss := p.lossGrad(w, L, label)
		p.loss[i] = loss
		if p.lossOnly {
			continue
		}
		p.backward(w, L)
		p.norms(w, L)
		ok := !math.IsNaN(loss) && !math.IsInf(loss, 0)
		for _, s := range w.sq {
			ok = ok && !math.IsNaN(s) && !math.IsInf(s, 0)
		}
		if !ok {
			p.loss[i] = math.NaN()
			for k := range w.sq {
				w.sq[k] = math.NaN()
			}
		}
		p.clip.Scale(i, w.sq, 0, w.c)
		if !ok {
			if p.mode == modeGradients {
				clear(p.out[i])
			}
			continue
		}
		if p.mode == modeGradients {
			p.capture(w, L, p.out[i])
		} else {
			p.accumulate(w, L)
		}
	}
}

// ---- forward ----

func (p *SeqPlan) layerNorm(n Norm, x, y, xh []float32, r []float64, L int) {
	D := p.t.Dim
	g := p.params[n.Weight.Offset : n.Weight.Offset+D]
	b := p.params[n.Bias.Offset : n.Bias.Offset+D]
	eps := p.t.eps()
	for t := range L {
		row := x[t*D : (t+1)*D]
		s := 0.0
		for _, v := range row {
			s += float64(v)
		}
		m := s / float64(D)
		vr := 0.0
		for _, v := range row {
			d := float64(v) - m
			vr += d * d
		}
		rs := 1 / math.Sqrt(vr/float64(D)+eps)
		r[t] = rs
		xr, yr := xh[t*D:(t+1)*D], y[t*D:(t+1)*D]
		for k, v := range row {
			h := float32((float64(v) - m) * rs)
			xr[k] = h
			yr[k] = g[k]*h + b[k]
		}
	}
}

// linForward is Y = X W + b (+ s (X A) B) over L rows.
func (p *SeqPlan) linForward(w *seqWorker, li int, X, Y []float32, L int) {
	s := &w.lin[li]
	w.sgemmPacked(L, X, s.in, &p.pk[li].f, 0, Y, s.out)
	if s.l.Bias.Len > 0 {
		b := p.params[s.l.Bias.Offset : s.l.Bias.Offset+s.out]
		for t := range L {
			row := Y[t*s.out : (t+1)*s.out]
			for k, v := range b {
				row[k] += v
			}
		}
	}
	if s.l.LoRAA.Len > 0 {
		r := p.t.LoRARank
		A := p.params[s.l.LoRAA.Offset : s.l.LoRAA.Offset+s.l.LoRAA.Len]
		B := p.params[s.l.LoRAB.Offset : s.l.LoRAB.Offset+s.l.LoRAB.Len]
		w.sgemm(gblas.NoTrans, gblas.NoTrans, L, r, s.in, 1, X, s.in, A, r, 0, w.u[li], r)
		w.sgemm(gblas.NoTrans, gblas.NoTrans, L, s.out, r, p.loraScale(), w.u[li], r, B, s.out, 1, Y, s.out)
	}
}

func (p *SeqPlan) loraScale() float32 {
	if p.t.LoRARank == 0 {
		return 0
	}
	return float32(p.t.LoRAAlpha / float64(p.t.LoRARank))
}

const geluC = 0.7978845608028654 // sqrt(2/pi)

func (p *SeqPlan) gelu(z, f, th []float32) {
	if p.t.ExactGELU {
		for k, v := range z {
			x := float64(v)
			f[k] = float32(0.5 * x * (1 + math.Erf(x/math.Sqrt2)))
		}
		return
	}
	// The tanh's argument in float64 as before, the tanh eight at a time
	// (biasTanh with a zero bias), in blocks that stay in cache.
	var zero [512]float32
	for k0 := 0; k0 < len(z); k0 += len(zero) {
		zs := z[k0:min(k0+len(zero), len(z))]
		ts, fs := th[k0:k0+len(zs)], f[k0:k0+len(zs)]
		for k, x := range zs {
			ts[k] = float32(geluC * (float64(x) + 0.044715*float64(x)*float64(x)*float64(x)))
		}
		biasTanh(ts, zero[:len(zs)])
		for k, x := range zs {
			fs[k] = 0.5 * x * (1 + ts[k])
		}
	}
}

func (p *SeqPlan) geluGrad(z, th, g []float32) {
	if p.t.ExactGELU {
		for k, v := range z {
			x := float64(v)
			d := 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
			g[k] = float32(float64(g[k]) * d)
		}
		return
	}
	geluGradTanh(z, th[:len(z)], g[:len(z)])
}

// attnBlock is the rows of a causal attention's score block: the rows
// [r0, r1) attend to the tokens [0, r1) only, so the products skip the
// masked blocks above the diagonal.
const attnBlock = 32

// attnRows returns the end of the row block starting at r0 and the
// number of keys its rows see.
func (p *SeqPlan) attnRows(r0, L int) (r1, keys int) {
	if !p.t.Causal {
		return L, L
	}
	r1 = min(r0+attnBlock, L)
	return r1, r1
}

// attention computes att = softmax(Q K^T / sqrt(dh) + mask) V per head.
func (p *SeqPlan) attention(w *seqWorker, qkv, P, att []float32, L int) {
	D, nh := p.t.Dim, p.t.Heads
	dh := D / nh
	scale := float32(1 / math.Sqrt(float64(dh)))
	for h := range nh {
		Q, K, V := qkv[h*dh:], qkv[D+h*dh:], qkv[2*D+h*dh:]
		S := P[h*L*L : (h+1)*L*L]
		for r0 := 0; r0 < L; {
			r1, keys := p.attnRows(r0, L)
			w.sgemm(gblas.NoTrans, gblas.Trans, r1-r0, keys, dh, scale, Q[r0*3*D:], 3*D, K, 3*D, 0, S[r0*L:], L)
			for t := r0; t < r1; t++ {
				row := S[t*L : (t+1)*L]
				n := L
				if p.t.Causal {
					n = t + 1
				}
				mx := maxOf(row[:n])
				scaleBy(row[:n], float32(1/expShift(row[:n], row[:n], mx)))
				clear(row[n:])
			}
			w.sgemm(gblas.NoTrans, gblas.NoTrans, r1-r0, dh, keys, 1, S[r0*L:], L, V, 3*D, 0, att[r0*D+h*dh:], D)
			r0 = r1
		}
	}
}

// forward runs one example of L tokens (w.ids) and leaves the outputs in
// w.logits.
func (p *SeqPlan) forward(w *seqWorker, L int) {
	t := &p.t
	D := t.Dim
	wte := p.params[t.Wte.Offset : t.Wte.Offset+t.Wte.Len]
	h := w.h0
	for k := range L {
		copy(h[k*D:(k+1)*D], wte[w.ids[k]*D:(w.ids[k]+1)*D])
		var pos []float32
		if t.Positions == LearnedPositions {
			pos = p.params[t.Wpe.Offset+k*D : t.Wpe.Offset+(k+1)*D]
		} else {
			pos = p.sinus[k*D : (k+1)*D]
		}
		row := h[k*D : (k+1)*D]
		for j, v := range pos {
			row[j] += v
		}
	}
	cur := h
	if t.PostNorm {
		p.layerNorm(t.Final, h, w.hf, w.xh0, w.r0, L)
		copy(w.in[0], w.hf[:L*D])
		cur = w.in[0]
	}
	for bi := range t.Blocks {
		b := &t.Blocks[bi]
		if &w.in[bi][0] != &cur[0] {
			copy(w.in[bi][:L*D], cur[:L*D])
		}
		x := w.in[bi]
		li := 4 * bi
		if !t.PostNorm {
			p.layerNorm(b.Ln1, x, w.a1[bi], w.xh1[bi], w.r1[bi], L)
			p.linForward(w, li, w.a1[bi], w.qkv[bi], L)
		} else {
			p.linForward(w, li, x, w.qkv[bi], L)
		}
		p.attention(w, w.qkv[bi], w.p[bi], w.att[bi], L)
		mid := w.mid[bi]
		p.linForward(w, li+1, w.att[bi], mid, L)
		for k := range L * D {
			mid[k] += x[k]
		}
		mlpIn := mid
		if !t.PostNorm {
			p.layerNorm(b.Ln2, mid, w.a2[bi], w.xh2[bi], w.r2[bi], L)
			mlpIn = w.a2[bi]
		} else {
			// mid holds the residual sum; a1 its LayerNorm (the MLP's input).
			p.layerNorm(b.Ln1, mid, w.a1[bi], w.xh1[bi], w.r1[bi], L)
			mlpIn = w.a1[bi]
		}
		p.linForward(w, li+2, mlpIn, w.z[bi], L)
		p.gelu(w.z[bi][:L*t.Hidden], w.f[bi][:L*t.Hidden], w.th[bi])
		next := w.dh // scratch for the block output
		if bi+1 < len(t.Blocks) {
			next = w.in[bi+1]
		}
		p.linForward(w, li+3, w.f[bi], next, L)
		res := mid // pre-norm: the residual stream
		if t.PostNorm {
			res = mlpIn // post-norm: the normalized sum, the MLP's input
		}
		for k := range L * D {
			next[k] += res[k]
		}
		if t.PostNorm {
			copy(w.a2[bi][:L*D], next[:L*D]) // the residual sum before ln_2
			p.layerNorm(b.Ln2, w.a2[bi], next, w.xh2[bi], w.r2[bi], L)
		}
		cur = next
	}
	if !t.PostNorm {
		copy(w.dh2[:L*D], cur[:L*D]) // ln_f's input
		p.layerNorm(t.Final, w.dh2, w.hf, w.xhF, w.rF, L)
	} else {
		copy(w.hf[:L*D], cur[:L*D])
	}
	if t.Classes > 0 {
		r := p.poolRow(L)
		p.linForward(w, len(w.lin)-1, w.hf[r*D:(r+1)*D], w.logits, 1)
		return
	}
	V := t.Vocab
	hf, rows := w.hf, L
	if p.last {
		hf, rows = w.hf[(L-1)*D:L*D], 1 // the last position only, into row 0
	}
	if t.Head.Weight.Len > 0 {
		p.linForward(w, len(w.lin)-1, hf, w.logits, rows)
	} else {
		if p.last {
			w.sgemm(gblas.NoTrans, gblas.Trans, rows, V, D, 1, hf, D, wte, D, 0, w.logits, V)
		} else {
			w.sgemmPacked(rows, hf, D, &p.wteF, 0, w.logits, V)
		}
	}
}

func (p *SeqPlan) poolRow(L int) int {
	if p.t.Causal {
		return L - 1
	}
	return 0
}

// lossGrad computes the example's loss and leaves the gradient w.r.t.
// the logits in w.dbig.
func (p *SeqPlan) lossGrad(w *seqWorker, L, label int) float64 {
	t := &p.t
	if t.Classes > 0 {
		return softmaxCE(w.logits[:t.Classes], label, 1, w.dbig[:t.Classes])
	}
	V := t.Vocab
	clear(w.dbig[(L-1)*V : L*V])
	if L < 2 {
		return 0
	}
	inv := 1 / float64(L-1)
	loss := 0.0
	for k := range L - 1 {
		loss += softmaxCE(w.logits[k*V:(k+1)*V], w.ids[k+1], inv, w.dbig[k*V:(k+1)*V])
	}
	return loss * inv
}

// softmaxCE returns -log softmax(z)[y] and writes scale (softmax(z) -
// onehot(y)) into g: the exponentials in float32 eight at a time
// (expShift), summed in float64, then scaled by scale over their sum
// rounded to float32. A NaN or +Inf logit makes the loss NaN. g may be
// z (the gradient overwrites the logits).
func softmaxCE(z []float32, y int, sc float64, g []float32) float64 {
	mx := maxOf(z)
	zy := z[y] // g may be z
	s := expShift(z, g, mx)
	scaleBy(g[:len(z)], float32(sc/s))
	g[y] -= float32(sc)
	return math.Log(s) - float64(zy-mx)
}
