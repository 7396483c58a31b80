package nn

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/dpcore"
	gblas "gonum.org/v1/gonum/blas"
)

// Clipper turns one example's gradient norms into the factors by which
// its gradient enters the sum. Plan.Step calls it from its workers,
// concurrently for different examples.
type Clipper interface {
	// Scale receives example i's squared gradient L2 norm per affine layer
	// (weight and bias together, in network order), accumulated in float64
	// from exactly the float32 values that will be added (for a
	// convolution with ghost norms, recompute.go, a bound on the norm of
	// what its scaled output gradients add, computed from Gram matrices),
	// or all NaN if the example's input, loss or gradient is not finite;
	// linf is the gradient's L-inf norm when Options.LInf is set (else
	// 0). It writes one factor per affine layer into c: 0 drops the
	// layer's gradient, 1 keeps it. Factors must be finite and in [0, 1].
	// A factor f > 0 scales the layer's gradient entry by entry with
	// MulDown (f as Factor32, products rounded to nearest, subnormal
	// factors and products flushed to zero), so the scaled gradient that
	// enters the sum (for a dense layer, the scaled output-gradient rows,
	// whose outer products with the layer's inputs the accumulating GEMM
	// forms; for a ghost convolution, the sum over its output pixels of
	// those outer products, rows scaled by a factor at most f, not
	// flushed) has norm at most f(1+2^-24)^2 times the exact norm whose
	// square sq holds, however small the products. Every kept example is
	// scaled, f = 1 included, so the work does not depend on the factor.
	Scale(i int, sq []float64, linf float64, c []float64)
}

// Options configures a Plan.
type Options struct {
	// MaxBatch is the largest batch Step accepts (it sizes the
	// per-example statistics only; the buffers depend on Chunk).
	MaxBatch int
	// Workers is the number of goroutines a step uses; 0 means
	// GOMAXPROCS.
	Workers int
	// Chunk is the number of examples a worker runs through the network
	// at once (larger chunks make larger GEMMs and use more memory); 0
	// means automatic: the largest of 16, 8, 4, 2 and 1 whose buffers
	// stay within 10 MiB a worker, near the caches, or more if a layer's
	// weight is larger than the caches (streamChunk).
	Chunk int
	// LInf asks for each example's gradient L-inf norm (Clipper.Scale's
	// linf).
	LInf bool

	// noImplicit runs every convolution through im2col (tests compare
	// the two).
	noImplicit bool
	// noStride2 runs stride-2 convolutions through im2col (stride2.go;
	// tests and benchmarks compare the two).
	noStride2 bool
	// noFuseNorms runs norms unfused (fuseNorms; tests compare).
	noFuseNorms bool
	// noFuseJoins leaves a residual join's gradient in d (fuseJoins;
	// tests compare).
	noFuseJoins bool
	// noFuseGrads leaves every input gradient in d[src] (fuseGrads;
	// tests compare the two).
	noFuseGrads bool
	// noSkipGarbage makes an implicit convolution's per-example weight
	// gradient sum over its garbage columns too (zeros in the output
	// gradient) instead of skipping them (tests and benchmarks compare
	// the two).
	noSkipGarbage bool
	// noRowRuns makes an implicit convolution's forward and
	// input-gradient products compute their garbage rows too (tests and
	// benchmarks compare the two).
	noRowRuns bool
	// noPoolWindows has a fused 2x2 max pool's backward clear its
	// producer's map and scatter the maxima one by one instead of
	// writing whole windows with the vector kernel (tests compare the
	// two).
	noPoolWindows bool
	// noFuseOutputs leaves every output in its activation buffer, copied
	// into the next convolution's bordered map (fuseOutputs; tests
	// compare the two).
	noFuseOutputs bool
	// noExampleMajor runs every stage over the whole chunk (layer by
	// layer) on the private path too (setMajor; tests compare the two).
	noExampleMajor bool
	// noDeferDense adds every dense layer's weight gradient U^T G into
	// the accumulator after every chunk instead of gathering the rows of
	// up to denseGroup examples first for the layers of at least
	// deferMin weights (flushDense; tests and benchmarks compare the
	// two).
	noDeferDense bool
	// deferMin overrides deferWeights (tests).
	deferMin int
	// noPackJobs has each worker pack a fixed share of the weights (whole
	// layers, by weight count) and wait for the others before its first
	// chunk, instead of taking the layers in turn and waiting only for
	// those it reaches still being packed (packShare; benchmarks compare
	// the two).
	noPackJobs bool
	// noDenseInPlace runs every dense layer's forward product and input
	// gradient over its packed weight instead of reading the large ones
	// in place (Plan.inPlace; tests and benchmarks compare the two).
	noDenseInPlace bool
	// noPairHead runs the dense head of every chunk on its own instead
	// of several chunks' at once (Plan.head; tests and benchmarks compare
	// the two).
	noPairHead bool
	// headGroup overrides the number of chunks whose dense head runs at
	// once (setHead; benchmarks).
	headGroup int
	// noHeadStream leaves the dense head's weight cold when a group's
	// forward pass reaches it instead of streaming it into L2 during the
	// last convolutions (Plan.streamAt; same values, benchmarks compare
	// the two).
	noHeadStream bool
	// headStream overrides how many of the last convolutions before the
	// head stream its weight (benchmarks).
	headStream int
	// noRecompute materializes every convolution's per-example gradient
	// (tests compare with recomputing them, recompute.go).
	noRecompute bool
	// panelRows overrides the recomputed gradients' panel rows (tests).
	panelRows int
	// noGhost keeps every convolution's norm from its per-example
	// gradient (tests and benchmarks compare with ghost norms,
	// recompute.go).
	noGhost       bool
	sumPerExample bool
	// col2imRows overrides which im2col convolutions compute their
	// input gradient a kernel row at a time (Plan.col2imRows): 1 makes
	// every one whose kernel has more than one row do it, -1 none (tests
	// and benchmarks compare the two); 0 leaves it to the weight's size.
	col2imRows int8
	// noPrefetch turns off the products' prefetch of the next
	// micro-panel of every packed right operand (blas
	// PackedB32.SetPrefetch; same values, benchmarks compare the two).
	noPrefetch bool
	// noGpOne keeps each example's bordered output gradients in its own
	// part of w.gp in the example-major section's backward pass instead
	// of the first example's part for all (worker.gpOne: the CIFAR CNN
	// touches 560 KiB of gp a worker instead of 1.1 MiB, and its step
	// took 0.5-2.3% less CPU at batch 64, BENCHMARKS.md; same values,
	// tests and benchmarks compare the two).
	noGpOne bool
	// noPoolOut has a max pool that writes its producer's bordered
	// output gradient take the producer's activation derivative at its
	// input (each slot of a group keeping that input) instead of at its
	// output (poolOut; same values, tests and benchmarks compare the
	// two).
	noPoolOut bool
	// noWarmFlush has finish's first flush of the deferred dense rows
	// write into dst and the second into its accumulator's deferred
	// weights, both last written a step ago, instead of each into its
	// worker's per-example gradient buffer, in cache after the chunks
	// (flushWarm; same values, tests and benchmarks compare the two);
	// directFirst keeps the first flush into dst.
	noWarmFlush, directFirst bool
	// noFinish ends a training step as before finish (finish.go): each
	// worker flushes its dense rows into its accumulator, waits for the
	// others and sums a fixed share of the accumulators (same values;
	// tests and benchmarks compare the two).
	noFinish bool
	// finishHook, if set, runs in finish once worker wi is through its
	// chunks (tests order the workers' flushes with it).
	finishHook func(wi int)
	// leaveHook, if set, runs as worker wi > 0 leaves a step that ended
	// with finish, between its two signals to worker 0 (tests delay it).
	leaveHook func(wi int)
	// noHugePages leaves the workers' buffers and the packed weights on
	// the OS's base pages instead of asking for transparent huge pages
	// (arena; same values, benchmarks compare the two); noArena makes
	// each buffer on its own, as before the arena; noPlaceWeights leaves
	// only the packed weights out of it (placeWeights).
	noHugePages, noArena, noPlaceWeights bool
	// noColdSplit carves every buffer of a worker from its huge-page
	// arena, those a private step never touches too, instead of those
	// from one on base pages (buildWorker), and asks for a huge page for
	// each arena's last, partial one too (newArena; same values, tests
	// and benchmarks compare the two).
	noColdSplit bool
	// seqNorms overrides a SeqPlan's choice of ghost norms by cost
	// (tests run both kinds on every weight).
	seqNorms seqNormRule
}

// seqNormRule is how a SeqPlan picks each weight's per-example norm.
type seqNormRule uint8

const (
	normsByCost seqNormRule = iota
	normsAllGhost
	normsAllMaterialized
)

type kind uint8

const (
	kConv kind = iota
	kDense
	kPool
	kFlatten
	kAvg
	kNorm
	kJoin // residual: activation src + activation skip
	kDrop
	kEmbed
)

// stage is one compiled layer.
type stage struct {
	kind    kind
	in, out Shape
	// affine layers: Z (P x fo per example) = U (P x fi) W + b.
	fi, fo, P      int
	act            Activation
	slope          float32   // LeakyReLU's
	noBias         []float32 // fo zeros, the bias of a layer without one
	w, b           Param
	k, stride, pad int // conv
	pool           int
	groups         int     // norm: groups (1 for LayerNorm)
	eps            float64 // norm
	perElem        bool    // norm: LayerNorm's element-wise affine
	aff            int     // index among layers with parameters
	src            int     // activation read (i for a plain stack)
	skip           int     // join: the shortcut activation added
	addGrad        bool    // backward adds into d[src] (another reader wrote it)
	addSkip        bool    // join: backward adds into d[skip]
	// toXp: the stage (an implicit convolution with a fused activation,
	// or a max pool) writes its output straight into the interior of
	// its consumer's bordered map (the next stage, an implicit
	// convolution and its only reader) instead of its activation buffer
	// (fuseOutputs); xpFilled: that consumer, which then copies nothing.
	toXp, xpFilled bool
	// gradToGp: the stage (an implicit convolution or a max pool, the
	// only reader of its input, fuseGrads; a norm, fuseNorms; a join for
	// its body, fuseJoins) writes its input gradient, times the
	// producer's activation derivative, straight into the producer's
	// bordered map gp instead of d[src]; gpFilled: an implicit
	// convolution whose gp its reader fills so.
	gradToGp, gpFilled bool
	rate               float64 // dropout
	seed               uint64  // dropout
	index              int     // position in the stage list (dropout masks)
	emb                *Embedding
	exOff              int // conv: offset of the per-example gradient in a perEx row
	// conv: wp is the weight with rows permuted from the parameter
	// layout (channel, kernel row, kernel column) to im2col's (kernel
	// row, kernel column, channel); perm[r] is the layout row of
	// internal row r.
	wp   []float32
	perm []int32
	// pw is the weight packed as the forward product's right operand,
	// pwt its transpose as the input gradient's (packed once per step by
	// permute, read by every worker).
	pw, pwt blas.PackedB32
	// pwk is pwt cut into the columns of each kernel row, when the
	// input gradient is computed a kernel row at a time
	// (Plan.col2imRows).
	pwk []blas.PackedB32
	// implicit convolutions (implicit.go): the zero-bordered map's width
	// and height, the wide output's rows, each kernel row's packed
	// weight (pwr) and flipped weight (pwx, packed from wflip).
	implicit bool
	wp2, hp2 int
	// wq is the pitch of the wide output's rows (and of gp's), in pixels;
	// gh is gp's rows and gpad its top and left border.
	wq, gh, gpad int
	wide         int
	wideM        int // wide rounded up to implicitRows: the rows the products compute
	pwr, pwx     []blas.PackedB32
	wflip        []float32
	// offX and offG are where each kernel row's windows start in xp (the
	// forward product's and the weight gradient's A) and, for stride 1,
	// in gp (the input gradient's A).
	offX, offG []int
	// recompute: the per-example weight gradient is computed twice in
	// panels of panel rows, never stored whole (recompute.go).
	recompute bool
	panel     int
	// ghost: the per-example norm is a ghost norm and the clipped sum one
	// product over the chunk (recompute.go).
	ghost bool
	// panelSum: the book-keeping product Uᵀ G over a chunk goes through
	// a panel buffer (sumProduct).
	panelSum bool
	// capOff: a recomputed or ghost convolution's offset in a w.capEx row.
	capOff int

	// normTo: a norm whose only reader is implicit convolution normTo
	// writes its output straight into that convolution's bordered map
	// (xpFilled), never into its activation (fuseNorms).
	normTo int
	// skipToGp: a join writes its gradient, times the producer's
	// activation derivative, straight into the bordered output gradient
	// of the implicit convolution that made its shortcut activation (its
	// body's: gradToGp), instead of into d (fuseJoins).
	skipToGp bool
}

// weight returns the affine stage's weight as the GEMMs read it.
func (s *stage) weight(params []float32) []float32 {
	if s.kind == kConv {
		return s.wp
	}
	return params[s.w.Offset : s.w.Offset+s.w.Len]
}

// segment is a run of the gradient that reduce copies from the workers'
// accumulators (internal layout) to the caller's buffer (parameter
// layout).
type segment struct{ src, dst, n int }

// Plan is a Network compiled for a fixed number of workers and chunk
// size, with all buffers allocated. It is not safe for concurrent use.
type Plan struct {
	net      Network
	params   []float32
	stages   []stage
	naff     int
	exLen    int // per-example materialized (convolution) gradient length
	capLen   int // per-example gradient length of recomputed and ghost convolutions (Gradients)
	classes  int
	opt      Options
	workers  []*worker
	loss     []float64
	segs     []segment
	actShape []Shape // shape of activation k (the input, then stage k-1's output)
	// major is the number of leading stages a private step runs example
	// by example (setMajor), 0 for none.
	major int
	// head is the first stage of the dense head that a worker runs for
	// group chunks at once (setHead); 0 for none.
	head, group int
	// streamAt is the first stage of a group's last forward pass from
	// which the products prefetch the weight of head stage streamOf
	// (setStream); 0 for none.
	streamAt, streamOf int

	// per step
	x       []float32
	y       []int
	n       int
	chunk   int
	private bool
	clip    Clipper
	ctx     context.Context // nil: not cancellable
	capture [][]float32
	logits  []float32
	mode    mode
	dst     []float32
	// stepCount counts Step calls (dropout masks depend on it).
	stepCount uint64
	chunks    int
	active    int // workers with a chunk
	barrier   sync.WaitGroup
	packed    sync.WaitGroup // the weights are packed (permuteShare, with Options.noPackJobs)
	// packOrder is the stages whose weights a step packs, largest first;
	// packNext the next one a worker takes; ready[i] is done when stage
	// i's are packed (packShare).
	packOrder []int
	packNext  atomic.Int32
	ready     []sync.WaitGroup
	done      sync.WaitGroup
	flushes   sync.WaitGroup // the workers' deferred dense rows are flushed (finish)
	splits    [][]int
	end       endState

	// mem holds the packed weights and the weight copies they are
	// packed from (placeWeights; nil with Options.noArena).
	mem *arena

	// StepAdd's pieces (physical.go): adding is set from the first
	// piece to SumInto; first is the batch index of the current piece's
	// first example, added the chunks the pieces so far made.
	adding       bool
	first, added int
}

// slot is the part of a worker's buffers that a chunk keeps from its
// forward pass to its backward pass. A worker has one, or Plan.group
// when it runs the dense head of that many chunks at once (Plan.head;
// the current one in worker.slot, the others in worker.slots): then slot
// k's head activations and gradients are the rows of chunk k
// in the first slot's buffers (sized for the group), and its gradients
// before the head are the first slot's (one chunk's backward pass is
// over before the next one's starts).
type slot struct {
	act  [][]float32 // act[s]: chunk x size of stage s's input (NHWC); act[len] logits
	d    [][]float32 // d[s]: gradient w.r.t. act[s] (d[0] unused)
	u    [][]float32 // per stage: im2col rows (conv only)
	xp   [][]float32 // per stage: zero-bordered input maps (implicit conv)
	arg  [][]int32   // per stage: argmax (pool only)
	pre  [][]float32 // per stage: pre-activation (GELU only)
	xh   [][]float32 // per stage: normalized input (norm only)
	rstd [][]float64 // per stage: 1/sqrt(var+eps) per example and group (norm only)
	bad  []bool      // chunk
	i0   int         // first example of the current chunk
}

// worker holds one goroutine's buffers for a chunk of examples.
type worker struct {
	slot                   // the current chunk's (use)
	slots []slot           // with Plan.head, the group's (the current one's in slot)
	cur   int              // the index in slots of the current chunk's slot
	gp    [][]float32      // per stage: zero-bordered output gradients (implicit conv)
	gp1   [][]float32      // per stage: one example's gp, for gpOne when gp is cold (buildWorker)
	wide  []float32        // an implicit convolution's wide product
	gpk   blas.PackedB32   // an example's output gradient packed for its K weight-gradient products
	pan   []float32        // a recomputed weight gradient's panel
	gpks  []blas.PackedB32 // the chunk's output gradients packed (recompute.go)
	du    []float32        // conv input-gradient rows
	ex    []float32        // chunk x exLen per-example convolution gradients
	sq    []float64        // chunk x naff
	linf  []float64        // chunk
	c     []float64        // chunk x naff
	col   []float64        // bias column sums
	acc   []float32        // gradient sum
	tmp   []float32        // an input gradient to be added into d[src]
	vec   []float32        // an embedding row's gradient
	gemm  blas.Serial32
	log   *productLog // while RecordProducts is on
	// ghost norms (recompute.go): the Gram matrices, U's columns and G
	// widened, and per example and affine layer the weight factor's
	// reduction e/Y.
	gemm64             blas.Serial64
	gx, gg, ud, gd, xg []float64
	gr                 []float64
	// capEx: chunk x capLen, the recomputed and ghost convolutions'
	// per-example gradients, allocated by the first Gradients call.
	capEx []float32
	// biasRow is an implicit convolution's bias repeated over a map row.
	biasRow []float32
	// dU, dG: per dense stage, the input rows and (scaled) output
	// gradient rows of the dn examples whose weight gradient is not yet
	// in acc (deferDense).
	dU, dG [][]float32
	dn     int
	// accDense is set when acc's deferred dense weights hold this step's
	// sums (cleared with the rest at the step's start, or by flushDense's
	// first flush; finish.go).
	accDense bool
	// gpOne: every example's bordered output gradients are in one map,
	// gp1's or the first example's part of gp (gpOf): set in the
	// example-major section's backward pass, where each example's are
	// read only before the next example's are written.
	gpOne bool
	// dpad and dpadC: four rows of a dense layer's input and output
	// (the larger of its widths), for the last rows of a chunk of other
	// than a multiple of four read in place (denseForward).
	dpad, dpadC []float32
	// mem is the arena the float32 buffers are carved from (nil with
	// Options.noArena); cold the one on base pages of those a private
	// step never touches (buildWorker; nil with Options.noArena or
	// noColdSplit, or when there are none).
	mem, cold *arena
}

// NewPlan compiles net over the parameter buffer params (shared, not
// copied: the plan sees later writes to it).
func NewPlan(net Network, params []float32, opt Options) (*Plan, error) {
	shapes, err := net.Shapes()
	if err != nil {
		return nil, err
	}
	if opt.MaxBatch <= 0 {
		return nil, dpcore.Invalid("nn", "plan: MaxBatch %d", opt.MaxBatch)
	}
	if opt.Workers < 0 || opt.Chunk < 0 {
		return nil, dpcore.Invalid("nn", "plan: %d workers, chunk %d", opt.Workers, opt.Chunk)
	}
	if opt.Workers == 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	p := &Plan{net: net, params: params, opt: opt, classes: shapes[len(shapes)-1].C}
	p.actShape = []Shape{net.Input}
	if _, _, err := p.compile(net.Layers, net.Input, 0, ""); err != nil {
		return nil, err
	}
	p.markGradWrites()
	if !opt.noFuseGrads {
		p.fuseGrads()
	}
	if !opt.noFuseNorms {
		p.fuseNorms()
	}
	if !opt.noFuseJoins {
		p.fuseJoins()
	}
	if !opt.noFuseOutputs {
		p.fuseOutputs()
	}
	p.setMajor()
	if p.naff == 0 {
		return nil, dpcore.Invalid("nn", "plan: no layer has parameters")
	}
	p.segments()
	// Size the chunk (automatic: 16 examples, fewer while one worker's
	// buffers would pass autoChunkBytes) and refuse sizes that cannot fit
	// before allocating them.
	auto := opt.Chunk == 0
	if auto {
		opt.Chunk = min(16, opt.MaxBatch)
		for opt.Chunk > 1 && p.bufferBytes(opt.Chunk, 1) > autoChunkBytes {
			opt.Chunk /= 2
		}
		opt.Chunk = max(opt.Chunk, p.streamChunk())
	}
	opt.Chunk = min(opt.Chunk, opt.MaxBatch)
	p.opt = opt
	if need := p.bufferBytes(opt.Chunk, opt.Workers); need > maxPlanBytes {
		return nil, dpcore.Invalid("nn", "plan: buffers need %.1f GiB for %d workers of %d examples (limit %d GiB)",
			float64(need)/(1<<30), opt.Workers, opt.Chunk, maxPlanBytes>>30)
	}
	p.loss = make([]float64, opt.MaxBatch)
	p.setHead()
	// The workers' buffers, each worker's in arenas of its own (one
	// sizing pass: the workers are alike).
	var size, cold arena
	if !opt.noArena {
		p.buildWorker(&size, &cold)
	}
	for range opt.Workers {
		p.workers = append(p.workers, p.newWorker(size.off, cold.off))
	}
	p.placeWeights()
	p.splitSegments()
	p.endJobs()
	p.packJobs()
	if opt.noPrefetch {
		p.setPrefetch()
	}
	return p, nil
}

// placeWeights makes the weight copies a step packs from (each
// convolution's permuted weight wp and flipped weight wflip) and, with
// the arena (unless Options.noArena), places them and every packed
// operand the workers share in one arena (Plan.mem), in stage order: it
// packs them once into scratch storage for their lengths (from copies
// that are views of one scratch slice: only the lengths count), then
// gives each its place, which the steps' packing fills.
func (p *Plan) placeWeights() {
	copies := func(m *arena) {
		for i := range p.stages {
			if s := &p.stages[i]; s.kind == kConv {
				s.wp = m.f32(s.fi * s.fo)
				if s.implicit {
					s.wflip = m.f32(s.fi * s.fo)
				}
			}
		}
	}
	if p.opt.noArena || p.opt.noPlaceWeights {
		copies(&arena{plain: true})
		return
	}
	var size arena
	copies(&size)
	var packs []*blas.PackedB32
	var scratch []float32
	for i := range p.stages {
		s := &p.stages[i]
		if !p.packs(s) {
			continue
		}
		// A packed length is at most k roundUp(n, nr) with k n = fi fo.
		if n := s.fi*s.fo + 64*(s.fi+(s.k+1)*s.fo); len(scratch) < n {
			scratch = make([]float32, n)
		}
		first := len(packs)
		packs = append(packs, &s.pw, &s.pwt)
		for k := range s.pwr {
			packs = append(packs, &s.pwr[k])
		}
		for k := range s.pwx {
			packs = append(packs, &s.pwx[k])
		}
		if p.col2imRows(s) {
			p.makeKernelRowPacks(s)
			for k := range s.pwk {
				packs = append(packs, &s.pwk[k])
			}
		}
		for _, b := range packs[first:] {
			b.SetStorage(scratch)
		}
		p.packStage(s, true)
	}
	lens := make([]int, len(packs))
	for k, b := range packs {
		lens[k] = b.Len()
		size.f32(lens[k])
	}
	m := newArena(size.off, p.opt.noHugePages, p.opt.noColdSplit)
	copies(m)
	for k, b := range packs {
		b.SetStorage(m.f32(lens[k]))
	}
	p.mem = m
}

// setPrefetch turns off the prefetch of every packed right operand the
// plan's products use (Options.noPrefetch): packing keeps the setting,
// so once is enough, but for the kernel rows of pwk, made by the first
// permuteShare that needs them.
func (p *Plan) setPrefetch() {
	var bs []*blas.PackedB32
	for i := range p.stages {
		s := &p.stages[i]
		bs = append(bs, &s.pw, &s.pwt)
		for k := range s.pwr {
			bs = append(bs, &s.pwr[k])
		}
		for k := range s.pwx {
			bs = append(bs, &s.pwx[k])
		}
	}
	for _, w := range p.workers {
		bs = append(bs, &w.gpk)
		for k := range w.gpks {
			bs = append(bs, &w.gpks[k])
		}
	}
	for _, b := range bs {
		b.SetPrefetch(false)
	}
}

// compile appends the stages of layers, whose input is activation src of
// shape in, and returns the output shape and activation index. Stage i
// always writes activation i+1.
func (p *Plan) compile(layers []Layer, in Shape, src int, path string) (Shape, int, error) {
	for li, l := range layers {
		name := fmt.Sprintf("%s%d", path, li)
		if r, ok := l.(Residual); ok {
			if len(r.Body) == 0 {
				return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: residual block with an empty body", name)
			}
			bo, bi, err := p.compile(r.Body, in, src, name+".body.")
			if err != nil {
				return Shape{}, 0, err
			}
			so, si := in, src
			if len(r.Shortcut) > 0 {
				if so, si, err = p.compile(r.Shortcut, in, src, name+".shortcut."); err != nil {
					return Shape{}, 0, err
				}
			}
			if bo != so {
				return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: residual body gives %+v, shortcut %+v", name, bo, so)
			}
			p.stages = append(p.stages, stage{kind: kJoin, in: bo, out: bo, P: 1, src: bi, skip: si})
			p.actShape = append(p.actShape, bo)
			in, src = bo, len(p.stages)
			continue
		}
		out, err := l.out(in)
		if err != nil {
			return Shape{}, 0, fmt.Errorf("nn: layer %s: %w", name, err)
		}
		s := stage{in: in, out: out, P: 1, src: src}
		switch l := l.(type) {
		case Conv2D:
			s.kind, s.k, s.stride, s.pad, s.act, s.slope, s.w, s.b = kConv, l.Kernel, l.Stride, l.Pad, l.Act, l.Slope, l.Weight, l.Bias
			s.fi, s.fo, s.P = l.Kernel*l.Kernel*s.in.C, l.Out, s.out.H*s.out.W
			if !p.opt.noImplicit {
				s.setImplicit(!p.opt.noStride2)
			}
			if !p.opt.noGhost {
				s.setGhost(p.opt.LInf)
			}
			if !p.opt.noRecompute && !s.ghost {
				s.setRecompute(p.opt.panelRows)
			}
			// A recomputed or ghost convolution keeps only its bias
			// gradient per example (Gradients materializes the rest in
			// w.capEx).
			s.exOff = p.exLen
			if s.recompute || s.ghost {
				p.exLen += s.b.Len
				s.capOff = p.capLen
				p.capLen += s.fi*s.fo + s.b.Len
			} else {
				p.exLen += s.fi*s.fo + s.b.Len
			}
			s.perm = make([]int32, s.fi)
			C, K := s.in.C, s.k
			for kr := range K {
				for kc := range K {
					for ch := range C {
						s.perm[(kr*K+kc)*C+ch] = int32(ch*K*K + kr*K + kc)
					}
				}
			}
		case Dense:
			s.kind, s.act, s.slope, s.w, s.b = kDense, l.Act, l.Slope, l.Weight, l.Bias
			s.fi, s.fo = s.in.C, l.Out
		case MaxPool:
			s.kind, s.pool = kPool, l.Size
		case Flatten:
			s.kind = kFlatten
		case AvgPool:
			s.kind, s.pool = kAvg, l.Size
		case Dropout:
			s.kind, s.rate, s.seed = kDrop, l.Rate, l.Seed
		case Embedding:
			if src != 0 || len(p.stages) != 0 {
				return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: an embedding must be the first layer (its input is the example's columns)", name)
			}
			e := l
			e.Tables = append([]EmbeddingTable(nil), l.Tables...)
			s.kind, s.emb = kEmbed, &e
			for _, t := range e.Tables {
				if t.Weight.Offset+t.Weight.Len > len(p.params) {
					return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: parameters [%d, %d) outside the buffer of %d", name, t.Weight.Offset, t.Weight.Offset+t.Weight.Len, len(p.params))
				}
			}
			s.aff = p.naff
			p.naff++
		case GroupNorm:
			s.kind, s.groups, s.eps, s.w, s.b, s.act = kNorm, l.Groups, l.Eps, l.Weight, l.Bias, l.Act
		case LayerNorm:
			s.kind, s.groups, s.eps, s.w, s.b, s.perElem, s.act = kNorm, 1, l.Eps, l.Weight, l.Bias, true, l.Act
		case Transformer:
			return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: a transformer runs on NewSeqPlan", name)
		default:
			return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: unsupported type %T", name, l)
		}
		if s.kind == kNorm {
			if s.eps == 0 {
				s.eps = 1e-5
			}
			s.exOff = p.exLen
			p.exLen += s.w.Len + s.b.Len
		}
		if (s.kind == kConv || s.kind == kDense) && s.b.Len == 0 {
			s.noBias = make([]float32, s.fo)
		}
		if s.kind == kConv || s.kind == kDense || s.kind == kNorm {
			for _, q := range []Param{s.w, s.b} {
				if q.Offset+q.Len > len(p.params) {
					return Shape{}, 0, dpcore.Invalid("nn", "plan: layer %s: parameters [%d, %d) outside the buffer of %d", name, q.Offset, q.Offset+q.Len, len(p.params))
				}
			}
			s.aff = p.naff
			p.naff++
		}
		s.index = len(p.stages)
		p.stages = append(p.stages, s)
		p.actShape = append(p.actShape, out)
		in, src = out, len(p.stages)
	}
	return in, src, nil
}

const (
	// autoChunkBytes bounds one worker's buffers for an automatically
	// sized chunk. A chunk runs through the whole network, so its buffers
	// are streamed once per layer and pass: while they stay near the
	// caches, steps are faster. Measured on 2 cores (BENCHMARKS.md, "Chunk
	// size"): the CIFAR CNN steps 1.5x faster at chunks of 4 examples (33
	// MiB a worker) than at 16 (125 MiB), in a third of the memory;
	// WRN-16-4, whose single example already takes 65 MiB, runs as fast
	// at 1 example as at 4 in half the memory; small dense models keep 16.
	// With implicit convolutions (no im2col buffers) the CIFAR CNN's
	// example takes 3.7 MiB: chunks of 4 (15 MiB) cost the same CPU time
	// per example as chunks of 8 (30 MiB) in two thirds of the peak
	// memory (BENCHMARKS.md, issue 42), hence 20 MiB then. Once its dense
	// head read its 1 MiB weight once a chunk instead of twice (Plan.inPlace),
	// chunks of 2 (8.7 MiB) took 1-2% less CPU than 4 at batch 64 and 5% less
	// at 500 (issue 42, fourth pass), hence 10 MiB.
	autoChunkBytes = 10 << 20
	// maxPlanBytes refuses plans whose buffers cannot be meant.
	maxPlanBytes = 64 << 30
)

// streamChunk is the smallest chunk that gives the product of every
// convolution whose weight is larger than the caches (bigWeightBytes) at
// least minStreamRows rows: such a weight is streamed from memory once per
// chunk for the forward product and once for the input gradient, so a
// chunk of one example makes WRN-16-4's 8x8x256 layers (2.4 MB weights, 64
// output pixels) memory-bound. Measured on 2 cores (BENCHMARKS.md, issue
// 42): WRN-16-4's private step at chunks of 2 took 4-8% less CPU than at
// 1, in 169 MiB instead of 127; chunks of 4 no less again, in 253 MiB.
// (Dense layers, one row an example, are left to the byte bound: not
// measured.)
func (p *Plan) streamChunk() int {
	const bigWeightBytes, minStreamRows = 1 << 20, 128
	c := 1
	for _, s := range p.stages {
		if s.kind == kConv && 4*s.fi*s.fo > bigWeightBytes {
			c = max(c, (minStreamRows+s.P-1)/s.P)
		}
	}
	return min(c, 16)
}

// bufferBytes is the memory the workers' buffers take for chunks of C
// examples.
func (p *Plan) bufferBytes(C, workers int) int64 {
	floats := int64(0)
	for _, sh := range p.actShape {
		floats += 3 * int64(C) * int64(sh.Size()) // act, d, tmp (bound)
	}
	for _, s := range p.stages {
		if s.kind == kConv && s.implicit {
			floats += int64(C)*int64(s.xpLen()+s.gpLen()) + int64(s.wideLen())
		} else if s.kind == kConv {
			floats += 2 * int64(C) * int64(s.P) * int64(s.fi) // im2col, input gradient rows
		}
		if s.kind == kPool || s.kind == kNorm || s.kind == kDrop || s.act == GELU {
			floats += int64(C) * int64(s.out.Size())
		}
	}
	floats += int64(p.exSlots(C))*int64(p.exLen) + int64(len(p.params))
	return 4 * floats * int64(workers)
}

// markGradWrites decides, for every activation read by several stages (a
// residual block's input), which reader's backward pass writes its
// gradient and which add to it: backward runs in decreasing stage order,
// so the last reader writes and the others add.
func (p *Plan) markGradWrites() {
	seen := make([]bool, len(p.actShape))
	for i := len(p.stages) - 1; i >= 0; i-- {
		s := &p.stages[i]
		if s.kind == kJoin {
			s.addSkip = seen[s.skip]
			seen[s.skip] = true
		}
		s.addGrad = seen[s.src]
		seen[s.src] = true
	}
}

// fuseGrads marks the stages whose backward pass writes its input
// gradient into the producing implicit convolution's bordered map with
// the activation's derivative applied (what the producer's own backward
// would have done reading it back from d[src]): an implicit convolution
// or a max pool that is its input's only reader, whose producer is an
// implicit convolution with an activation actGradTo takes. This saves a
// write and a read of every such gradient between layers.
func (p *Plan) fuseGrads() {
	readers, _ := p.readers()
	for i := range p.stages {
		s := &p.stages[i]
		if s.src == 0 || readers[s.src] != 1 || !(s.kind == kPool || s.kind == kConv && s.implicit) {
			continue
		}
		q := &p.stages[s.src-1] // stage src-1 writes activation src
		if q.kind != kConv || !q.implicit || !fusesActGrad(q.act) {
			continue
		}
		s.gradToGp, q.gpFilled = true, true
	}
}

// setMajor finds the example-major section: the leading stages that
// are implicit convolutions with an activation whose derivative is fused
// (Identity, Tanh, ReLU) and max pools, each reading the previous one's
// output. A private step's backward pass runs them example by example
// (the forward pass layer by layer, each weight read once a chunk: the
// same speed measured), and right after an example's backward takes its
// norms, factors and scaled adds (backward): its per-example gradient, written
// by the weight-gradient products, is added while it is in cache, and
// one example's gradient buffer serves the chunk (exGrad), instead of
// the chunk's gradients going out to memory and coming back. Every
// value is computed by the same operations in the same order (per
// example; each sum entry takes the examples in order). Only for plans
// whose per-example gradients are all in the section (no convolution
// after it, no norm or embedding, none recomputed); none with
// Options.noExampleMajor.
func (p *Plan) setMajor() {
	if p.opt.noExampleMajor {
		return
	}
	k, convs := 0, 0
	for ; k < len(p.stages); k++ {
		s := &p.stages[k]
		if s.src != k || s.addGrad || !(s.kind == kPool || s.kind == kConv && s.implicit && !s.recompute && fusesActGrad(s.act)) {
			break
		}
		if s.kind == kConv {
			convs++
		}
	}
	for _, s := range p.stages[k:] {
		if s.kind == kConv || s.kind == kNorm || s.kind == kEmbed {
			return
		}
	}
	if convs > 0 {
		p.major = k
	}
}

// setHead finds the dense head that a worker runs for several of its
// chunks at once (trainGroup): the trailing dense layers, a plain chain
// after some other stage, when one of them reads its weight in place
// (Plan.inPlace), for as many chunks as make the four rows its kernels
// take at a time (two of two examples). Such a weight (CIFAR's 2048x128
// head: 1 MiB) is out of the caches when the next chunk reaches it, the
// convolutions in between having streamed their maps through them; run
// once for two chunks, it is read from memory half as often, and the
// kernels' four rows are examples rather than padding. The stages before
// the head keep running on one chunk at a time (their maps sized the
// chunk), each chunk in its own slot. The results are the same bits:
// every row of the head is computed as on its own (the rows of its
// products are independent), and each chunk's norms and adds are made
// as before, in the same order. Measured on 2 cores (BENCHMARKS.md,
// issue 42): the CIFAR CNN's step took 0-2% less CPU at batch 64 and 500
// in 2.6 MiB more; groups of four chunks of two (eight rows) took 2-4%
// more (three chunks' state out of the caches by their backward pass).
// None with Options.noPairHead.
func (p *Plan) setHead() {
	g := 4 / p.opt.Chunk
	if p.opt.headGroup > 0 {
		g = p.opt.headGroup
	}
	if p.opt.noPairHead || g < 2 {
		return
	}
	h, inPlace := len(p.stages), false
	for ; h > 1; h-- {
		s := &p.stages[h-1]
		if s.kind != kDense || s.src != h-1 || s.addGrad {
			break
		}
		inPlace = inPlace || p.inPlace(s)
	}
	if !inPlace {
		return
	}
	p.head, p.group = h, g
	if !p.opt.noHeadStream {
		p.setStream()
	}
}

// setStream sets where a group's last forward pass starts streaming the
// head's weight read in place into the caches (trainGroup): the last
// implicit convolution before the head (or the first of the last
// Options.headStream ones),
// whose products prefetch a line of it every four steps of k among
// their multiply-adds (blas Serial32.PrefetchStream) instead of their
// own next micro-panel. The head's forward product then finds its
// weight in L2 rather than in memory (CIFAR's 1 MiB, otherwise evicted
// by the convolutions' maps and gradients since the group before read
// it), and its input gradient, which reads the weight again, still
// does. Streamed in a burst of prefetches just before the head instead,
// the weight stalled the core as long as the cold read did; during the
// one convolution the lines come in at a few GB/s beside its products
// and are still in L2 when the head reads them. Measured on 2 cores
// (BENCHMARKS.md, issue 42): the head's forward product in the CIFAR
// CNN's step took 30-36 us instead of 73 (0.6 ms less a batch-64 step,
// 0.2 ms less for the input gradient), the last convolution's products
// 0.4 ms more, and the step 1.0% less CPU at batch 64 (median of twelve
// series), 0.6% at 500 (eight); with the smaller working set of the
// example-major backward's single gradient maps, +0.6% (five) and 0.0%
// (three), within the machine's noise; with the step's buffers on
// huge pages too, quiet: +0.3% (four series; wall +0.3-0.5%) and +0.3%
// (wall +0.5%). The values are the same bits either way.
func (p *Plan) setStream() {
	for i := p.head; i < len(p.stages); i++ {
		if p.inPlace(&p.stages[i]) {
			p.streamOf = i
			break
		}
	}
	n := cmp.Or(p.opt.headStream, 1)
	for i := p.head - 1; i >= 0; i-- {
		if s := &p.stages[i]; s.kind == kConv && s.implicit {
			p.streamAt = i
			if n--; n == 0 {
				break
			}
		}
	}
}

// exSlots is the number of per-example gradients w.ex holds for chunks
// of C examples: one when the example-major section holds every stage
// that writes them (exGrad), else C.
func (p *Plan) exSlots(C int) int {
	if p.major > 0 {
		return 1
	}
	return C
}

// exampleMajor reports whether the current pass runs the example-major
// section (setMajor) example by example: private steps and Gradients.
func (p *Plan) exampleMajor() bool {
	return p.major > 0 && p.private && p.mode != modeForward
}

// fuseOutputs marks the stages that write their output straight into
// the next stage's bordered input map (toXp), skipping the activation
// buffer and the consumer's copy into its map (padInto): an implicit
// convolution with a fused activation (Identity, Tanh, ReLU: bias and
// activation written while compacting the product's wide rows) or a max
// pool, whose output's only reader is the next stage, a stride-1
// implicit convolution. Those readers of the output that remain (the
// activation's derivative in the backward pass, the non-private path's
// finiteness scan) read it there (outMap).
func (p *Plan) fuseOutputs() {
	readers, _ := p.readers()
	for i := 1; i < len(p.stages); i++ {
		s, q := &p.stages[i], &p.stages[i-1]
		if s.src != i || readers[i] != 1 || s.kind != kConv || !s.implicit || s.stride != 1 {
			continue
		}
		if q.kind == kPool || q.kind == kConv && q.implicit && fusesActGrad(q.act) {
			q.toXp, s.xpFilled = true, true
		}
	}
}

// segments lists the runs reduce copies: one per permuted convolution
// weight row, one per gap between them.
func (p *Plan) segments() {
	var rows []segment
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind != kConv {
			continue
		}
		for r, e := range s.perm {
			rows = append(rows, segment{src: s.w.Offset + r*s.fo, dst: s.w.Offset + int(e)*s.fo, n: s.fo})
		}
	}
	// Everything outside the convolution weights maps to itself.
	covered := make([]bool, len(p.params))
	for _, r := range rows {
		for k := range r.n {
			covered[r.src+k] = true
		}
	}
	for k := 0; k < len(p.params); {
		if covered[k] {
			k++
			continue
		}
		e := k
		for e < len(p.params) && !covered[e] {
			e++
		}
		rows = append(rows, segment{src: k, dst: k, n: e - k})
		k = e
	}
	p.segs = rows
}

// permuteShare copies the convolution weights into their internal row
// order and packs every affine layer's weight as its products read it (W
// for the forward product, Wᵀ for the input gradient, none for the first
// layer nor for a forward pass alone; implicit convolutions their kernel
// rows), once per step instead of once per product: for worker wi of W,
// its share of the layers (whole layers, cut where the weights so far
// pass wi/W of them).
func (p *Plan) permuteShare(wi, W int) {
	back := p.mode != modeForward // the input gradient's packs too
	total, done := 0, 0
	for i := range p.stages {
		if s := &p.stages[i]; p.packs(s) {
			total += s.fi * s.fo
		}
	}
	if total == 0 {
		return
	}
	for i := range p.stages {
		s := &p.stages[i]
		if !p.packs(s) {
			continue
		}
		mine := done*W/total == wi
		done += s.fi * s.fo
		if mine {
			p.packStage(s, back)
		}
	}
}

// packs reports whether a step packs stage s's weight (permuteShare,
// packShare): a convolution's, or a dense layer's not read in place.
func (p *Plan) packs(s *stage) bool {
	return s.kind == kConv || s.kind == kDense && !p.inPlace(s)
}

// packJobs lists the stages whose weights a step packs (permuteShare),
// the largest weights first, for the workers to take in turn (packShare):
// a worker that finishes a job early, or starts late, takes more of them,
// and both end their share near the same time.
func (p *Plan) packJobs() {
	p.packOrder = p.packOrder[:0]
	for i := range p.stages {
		if p.packs(&p.stages[i]) {
			p.packOrder = append(p.packOrder, i)
		}
	}
	slices.SortStableFunc(p.packOrder, func(a, b int) int {
		return p.stages[b].fi*p.stages[b].fo - p.stages[a].fi*p.stages[a].fo
	})
	p.ready = make([]sync.WaitGroup, len(p.stages))
}

// packShare packs the weights of the stages of p.packOrder that no other
// worker has taken yet, one stage at a time, marking each ready; a
// worker's forward pass waits for a stage's weights (awaitPacked) only
// when another worker is still packing them.
func (p *Plan) packShare() {
	back := p.mode != modeForward
	for {
		k := int(p.packNext.Add(1)) - 1
		if k >= len(p.packOrder) {
			return
		}
		i := p.packOrder[k]
		p.packStage(&p.stages[i], back)
		p.ready[i].Done()
	}
}

// awaitPacked waits until stage i's weights are packed for this step
// (packShare).
func (p *Plan) awaitPacked(i int) {
	if p.active > 1 && !p.opt.noPackJobs {
		p.ready[i].Wait()
	}
}

// packStage copies convolution stage s's weight into its internal row
// order and packs it, or dense stage s's, as the products read it (with
// back, the input gradient's packs too).
func (p *Plan) packStage(s *stage, back bool) {
	if s.kind == kConv {
		w := p.params[s.w.Offset : s.w.Offset+s.w.Len]
		for r, e := range s.perm {
			copy(s.wp[r*s.fo:(r+1)*s.fo], w[int(e)*s.fo:(int(e)+1)*s.fo])
		}
	}
	if s.implicit {
		s.packImplicit(back)
		return
	}
	if p.inPlace(s) {
		return // read in place (denseForward)
	}
	W := s.weight(p.params)
	blas.PackB32(gblas.NoTrans, s.fi, s.fo, 1, W, s.fo, &s.pw)
	switch {
	case back && p.col2imRows(s):
		KC := s.k * s.in.C
		p.makeKernelRowPacks(s)
		for kr := range s.pwk {
			blas.PackB32(gblas.Trans, s.fo, KC, 1, W[kr*KC*s.fo:], s.fo, &s.pwk[kr])
		}
	case back && s.src > 0:
		blas.PackB32(gblas.Trans, s.fo, s.fi, 1, W, s.fo, &s.pwt)
	}
}

// makeKernelRowPacks makes convolution s's packed kernel rows pwk
// (Plan.col2imRows) if they are not yet made.
func (p *Plan) makeKernelRowPacks(s *stage) {
	if len(s.pwk) != s.k {
		s.pwk = make([]blas.PackedB32, s.k)
		for kr := range s.pwk {
			s.pwk[kr].SetPrefetch(!p.opt.noPrefetch)
		}
	}
}

// newWorker returns a worker whose float32 buffers are carved from
// arenas of its own (made one by one with Options.noArena): hot, of
// the floats a training step touches, on huge pages, and cold, of the
// others, on base pages (coldArena, buildWorker).
func (p *Plan) newWorker(hot, cold int) *worker {
	if p.opt.noArena {
		return p.buildWorker(&arena{plain: true}, nil)
	}
	m := newArena(hot, p.opt.noHugePages, p.opt.noColdSplit)
	var c *arena
	if cold > 0 {
		c = coldArena(cold)
	}
	w := p.buildWorker(m, c)
	w.mem, w.cold = m, c
	return w
}

// buildWorker returns a worker whose float32 buffers m and cold carve
// (the others are made). A huge page is resident whole, so the buffers
// a private step never reads or writes, decided from the plan's
// stages, are carved from cold (unless Options.noColdSplit, or cold is
// nil), whose pages take memory only once something writes them: the
// activations written straight into their reader's bordered map
// (coldAct) and the gradients straight into their producer's
// (coldGrad), which no pass touches but the non-private step's drop of
// a non-finite example; tmp without a stage adding its input gradient;
// and the bordered output gradients of the example-major section's
// stages, which a private step keeps in one map of one example
// (oneGp: gp1, hot) and only the non-private step in gp, one an
// example. The CIFAR CNN's worker (chunks of 2) keeps 6.8 MiB in m
// and 3.3 in cold, WideResNet-16-4's 46.9 and 6.4 (TestColdUntouched
// checks that a private step leaves cold alone; BENCHMARKS.md). Only
// the placement changes: every buffer is there, zeroed, wherever it is
// carved.
func (p *Plan) buildWorker(m, cold *arena) *worker {
	if cold == nil || p.opt.noColdSplit {
		cold = m
	}
	C := p.opt.Chunk
	S := len(p.stages)
	w := &worker{
		gp: make([][]float32, S), gp1: make([][]float32, S),
		ex: m.f32(p.exSlots(C) * p.exLen), sq: make([]float64, C*p.naff), c: make([]float64, C*p.naff),
		linf: make([]float64, C),
	}
	w.act, w.d = make([][]float32, S+1), make([][]float32, S+1)
	w.u, w.arg, w.xp = make([][]float32, S), make([][]int32, S), make([][]float32, S)
	w.pre, w.xh, w.rstd = make([][]float32, S), make([][]float32, S), make([][]float64, S)
	w.bad = make([]bool, C)
	// rows is the examples activation k's buffers hold: a group's for
	// the dense head's activations (Plan.head).
	rows := func(k int) int {
		if p.head > 0 && k >= p.head {
			return p.group * C
		}
		return C
	}
	maxDU, maxFo, maxAct, maxWide, maxRow, maxPan, maxPad := 0, 0, 0, 0, 0, 0, 0
	// at is m for a buffer a private step touches (hot), else cold.
	at := func(hot bool) *arena {
		if hot {
			return m
		}
		return cold
	}
	adds := false // some stage adds its input gradient through tmp
	for _, s := range p.stages {
		adds = adds || s.addGrad
	}
	for k, sh := range p.actShape {
		w.act[k] = at(!p.coldAct(k)).f32(rows(k) * sh.Size())
		if k > 0 {
			w.d[k] = at(!p.coldGrad(k)).f32(rows(k) * sh.Size())
		}
		maxAct = max(maxAct, C*sh.Size())
	}
	w.tmp = at(adds).f32(maxAct)
	for i, s := range p.stages {
		switch s.kind {
		case kConv:
			if s.panelSum {
				maxPan = max(maxPan, min(s.fi, ghostPanel)*s.fo)
				w.gpks = make([]blas.PackedB32, C)
			}
			if s.ghost {
				w.gx = make([]float64, max(len(w.gx), s.P*s.P))
				w.gg = make([]float64, max(len(w.gg), s.P*s.P))
				ud, xg := s.ghostLen()
				w.ud = make([]float64, max(len(w.ud), ud))
				w.xg = make([]float64, max(len(w.xg), xg))
				w.gd = make([]float64, max(len(w.gd), s.P*s.fo))
				w.gr = make([]float64, C*p.naff)
			}
			if s.recompute {
				w.gpks = make([]blas.PackedB32, C)
				maxPan = max(maxPan, s.panel*s.fo)
			}
			if s.implicit {
				w.xp[i] = m.f32(C * s.xpLen())
				if p.oneGp(i) && cold != m {
					w.gp1[i] = m.f32(s.gpLen())
					w.gp[i] = cold.f32(C * s.gpLen())
				} else {
					w.gp[i] = m.f32(C * s.gpLen())
				}
				maxWide = max(maxWide, s.wideLen())
				maxRow = max(maxRow, s.out.W*s.fo)
				break
			}
			w.u[i] = m.f32(C * s.P * s.fi)
			if s.src > 0 {
				maxDU = max(maxDU, C*s.P*s.fi)
			}
		case kPool:
			w.arg[i] = make([]int32, C*s.out.Size())
		case kDrop:
			w.pre[i] = m.f32(C * s.out.Size()) // the mask
		case kNorm:
			w.xh[i] = m.f32(C * s.in.Size())
			w.rstd[i] = make([]float64, C*s.groups)
		}
		if s.act == GELU {
			w.pre[i] = m.f32(rows(i+1) * s.out.Size())
		}
		maxFo = max(maxFo, s.fo, normScratch(s.in.C))
		if s.kind == kEmbed {
			for _, t := range s.emb.Tables {
				maxFo = max(maxFo, t.Dim)
				if len(w.vec) < t.Dim {
					w.vec = m.f32(t.Dim)
				}
			}
		}
	}
	for i, s := range p.stages {
		if p.inPlace(&s) {
			n := 4 * max(s.fi, s.fo)
			maxPad = max(maxPad, n)
		}
		if p.deferred(&s) {
			if w.dU == nil {
				w.dU, w.dG = make([][]float32, S), make([][]float32, S)
			}
			n := max(C, denseGroup)
			w.dU[i], w.dG[i] = m.f32(n*s.fi), m.f32(n*s.fo)
		}
	}
	if maxPad > 0 {
		w.dpad, w.dpadC = m.f32(maxPad), m.f32(maxPad)
	}
	if maxPan > 0 {
		w.pan = m.f32(maxPan)
	}
	w.du = m.f32(maxDU)
	w.wide = m.f32(maxWide)
	w.biasRow = m.f32(maxRow)
	w.col = make([]float64, maxFo)
	if !m.plain {
		// The output gradients packed for the weight gradients' products
		// (implicit.go, recompute.go), in the arena too.
		gpk, gpks := 0, 0
		for _, s := range p.stages {
			if s.kind != kConv {
				continue
			}
			gpk = max(gpk, blas.PackedLen32(s.P, s.fo, 0, 0))
			if s.implicit {
				gpk = max(gpk, blas.PackedLen32(s.wide, s.fo, 0, 0))
			}
			if s.recompute || s.panelSum {
				gpks = max(gpks, blas.PackedLen32(s.P, s.fo, 0, 0))
			}
		}
		w.gpk.SetStorage(m.f32(gpk))
		for k := range w.gpks {
			w.gpks[k].SetStorage(m.f32(gpks))
		}
	}
	if p.group > 1 {
		w.slots = make([]slot, p.group)
		w.slots[0] = w.slot
		for g := 1; g < p.group; g++ {
			p.groupSlot(w, g, m, cold)
		}
	}
	// The accumulator last: the part of it a private step does not
	// write, the deferred dense weights when the workers flush them
	// elsewhere (flushWarm), is its end in a network whose dense head is
	// last, so that it falls in the arena's last huge page, which is
	// left on base pages (newArena).
	w.acc = m.f32(len(p.params))
	return w
}

// oneGp reports whether implicit stage i's bordered output gradients
// are all in one map in a private step (the example-major section's
// backward pass, gpOne): the others' are cold.
func (p *Plan) oneGp(i int) bool { return i < p.major && !p.opt.noGpOne }

// coldAct reports whether activation k lives in no buffer of its own in
// any pass: its producer, a stage before the logits, writes it straight
// into the bordered input map of its only reader (fuseOutputs,
// fuseNorms), where every later reader reads it (outMap, normIO), and
// that reader never reads activation k.
func (p *Plan) coldAct(k int) bool {
	if k == 0 || k >= len(p.stages) {
		return false
	}
	s := &p.stages[k-1]
	return s.toXp || s.xpFilledBy()
}

// coldGrad reports whether the gradient w.r.t. activation k lives in no
// buffer of its own in a training step's backward pass (d[k]): its
// producer is an implicit convolution whose only reader writes that
// gradient straight into its bordered output gradient (gpFilled:
// fuseGrads, fuseNorms, fuseJoins), which it then reads instead. (The
// non-private path clears an example's d[k] it drops, zeroExample.)
func (p *Plan) coldGrad(k int) bool {
	if k == 0 || k >= len(p.stages) {
		return false
	}
	s := &p.stages[k-1]
	return s.kind == kConv && s.implicit && s.gpFilled
}

// use makes slot k of the group the current one (Plan.head).
func (w *worker) use(k int) {
	if k != w.cur {
		w.slots[w.cur], w.slot, w.cur = w.slot, w.slots[k], k
	}
}

// groupSlot fills worker w's slot g (Plan.head) from the arenas m and
// cold (buildWorker): buffers of its own for the state a chunk keeps
// from its forward to its backward pass before the head, views of the
// first slot's rows of chunk g for the head's, and the first slot's
// gradients before the head.
func (p *Plan) groupSlot(w *worker, g int, m, cold *arena) {
	C := p.opt.Chunk
	a, b := &w.slots[0], &w.slots[g]
	b.act, b.d = make([][]float32, len(a.act)), make([][]float32, len(a.d))
	for k, sh := range p.actShape {
		if k >= p.head {
			b.act[k], b.d[k] = a.act[k][g*C*sh.Size():], a.d[k][g*C*sh.Size():]
			continue
		}
		b.act[k], b.d[k] = a.act[k], a.d[k]
		if !p.sharedAct(k) {
			if p.coldAct(k) {
				b.act[k] = cold.f32(len(a.act[k]))
			} else {
				b.act[k] = m.f32(len(a.act[k]))
			}
		}
	}
	b.u, b.xp, b.xh = m.like(a.u), m.like(a.xp), m.like(a.xh)
	b.arg, b.rstd = likeAll(a.arg), likeAll(a.rstd)
	b.pre = m.like(a.pre)
	for i := p.head; i < len(p.stages); i++ {
		if a.pre[i] != nil {
			b.pre[i] = a.pre[i][g*C*p.stages[i].out.Size():]
		}
	}
	b.bad = make([]bool, len(a.bad))
}

// sharedAct reports whether activation k, before the dense head, is read
// by nothing after its chunk's forward pass (the input of a max pool
// that takes its derivative at its output, poolOut): the slots of a
// group then share one buffer for it.
func (p *Plan) sharedAct(k int) bool {
	for i := range p.stages {
		if s := &p.stages[i]; s.src == k && p.poolOut(s) {
			return true
		}
	}
	return false
}

// likeAll returns new zeroed buffers of the lengths of bufs (nil for
// the empty ones).
func likeAll[T any](bufs [][]T) [][]T {
	out := make([][]T, len(bufs))
	for k, b := range bufs {
		if len(b) > 0 {
			out[k] = make([]T, len(b))
		}
	}
	return out
}

// StepCount is the number of Step calls so far; dropout masks depend on
// it.
func (p *Plan) StepCount() uint64 { return p.stepCount }

// SetStepCount sets the step counter, for resuming a run from a
// checkpoint with the same dropout masks.
func (p *Plan) SetStepCount(t uint64) { p.stepCount = t }

// Classes is the length of the network's output.
func (p *Plan) Classes() int { return p.classes }

// InputSize is the number of floats of one example.
func (p *Plan) InputSize() int { return p.net.Input.Size() }

// Affine is the number of layers with parameters (Clipper.Scale's
// len(sq)).
func (p *Plan) Affine() int { return p.naff }

// CheckInputs checks examples x (CHW each, any number) as Step would
// before running them: the length, and an embedding's ids (integers in
// range, or -1). A training loop checks its whole training set with it
// before the first step, so that no step fails on one example's values.
func (p *Plan) CheckInputs(x []float32) error {
	in := p.net.Input.Size()
	if len(x)%in != 0 {
		return dpcore.Invalid("nn", "%d floats are not whole examples of %d", len(x), in)
	}
	if len(x) == 0 {
		return nil
	}
	return p.check(x, nil, len(x)/in)
}

func (p *Plan) check(x []float32, y []int, n int) error {
	in := p.net.Input.Size()
	if n <= 0 || len(x) != n*in {
		return dpcore.Invalid("nn", "%d floats for %d examples of %d", len(x), n, in)
	}
	if len(p.stages) > 0 && p.stages[0].kind == kEmbed {
		if err := p.stages[0].emb.checkIDs(x, n, in); err != nil {
			return err
		}
	}
	if y != nil {
		if n > p.opt.MaxBatch {
			return dpcore.Invalid("nn", "batch %d > MaxBatch %d", n, p.opt.MaxBatch)
		}
		if len(y) != n {
			return dpcore.Invalid("nn", "%d labels for %d examples", len(y), n)
		}
		for i, c := range y {
			if c < 0 || c >= p.classes {
				return dpcore.Invalid("nn", "label %d of example %d not in [0,%d)", c, i, p.classes)
			}
		}
	}
	return nil
}

// Step runs the forward and backward pass on the len(y) examples x (CHW
// each) with labels y and writes into dst (len(params)) the sum of their
// gradients of the cross-entropy loss: unclipped if clip is nil, else
// each example's layers scaled by the factors clip returns. Examples whose
// input, loss or gradient is not finite contribute nothing (clip sees NaN
// norms). It returns each example's loss (NaN for those), valid until the
// next call.
func (p *Plan) Step(x []float32, y []int, dst []float32, clip Clipper) ([]float64, error) {
	return p.StepContext(context.Background(), x, y, dst, clip)
}

// StepContext is Step, stopping between chunks of examples when ctx is
// done: it then returns ctx's error and dst holds no
// meaningful sum. A step of a large model over a large batch takes
// minutes; this is what lets SIGTERM stop it within seconds.
func (p *Plan) StepContext(ctx context.Context, x []float32, y []int, dst []float32, clip Clipper) ([]float64, error) {
	if err := checkStep(p.check, x, y, dst, len(p.params)); err != nil {
		return nil, err
	}
	p.adding, p.first = false, 0 // a batch of StepAdd pieces is abandoned
	p.x, p.y, p.n, p.clip, p.private, p.ctx = x, y, len(y), clip, clip != nil, ctx
	p.run(modeTrain, dst)
	p.x, p.y, p.clip, p.ctx = nil, nil, nil, nil
	if ctx != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("nn: step: %w", ctx.Err())
	}
	p.stepCount++
	return p.loss[:len(y)], nil
}

// Gradients writes each example's unclipped gradient into out[i]
// (len(params) each), for tests and audits; it returns the losses as Step.
func (p *Plan) Gradients(x []float32, y []int, out [][]float32) ([]float64, error) {
	if err := p.check(x, y, len(y)); err != nil {
		return nil, err
	}
	if err := checkOutputs(out, len(y), len(p.params)); err != nil {
		return nil, err
	}
	p.adding, p.first = false, 0
	for _, w := range p.workers {
		if len(w.capEx) < p.opt.Chunk*p.capLen {
			w.capEx = make([]float32, p.opt.Chunk*p.capLen)
		}
	}
	p.x, p.y, p.n, p.clip, p.private, p.capture = x, y, len(y), unit{}, true, out
	p.run(modeGradients, nil)
	p.x, p.y, p.clip, p.capture = nil, nil, nil, nil
	return p.loss[:len(y)], nil
}

// checkStep checks a step's arguments on an executor (Plan or SeqPlan)
// with nparams parameters, whose own check validates the examples.
func checkStep(check func(x []float32, y []int, n int) error, x []float32, y []int, dst []float32, nparams int) error {
	if y == nil {
		return dpcore.Invalid("nn", "step: no labels")
	}
	if err := check(x, y, len(y)); err != nil {
		return err
	}
	if len(dst) != nparams {
		return dpcore.Invalid("nn", "step: len(dst) = %d, want %d", len(dst), nparams)
	}
	return nil
}

// checkOutputs checks Gradients' buffers: n of size floats each.
func checkOutputs(out [][]float32, n, size int) error {
	if len(out) != n {
		return dpcore.Invalid("nn", "gradients: %d outputs for %d examples", len(out), n)
	}
	for _, o := range out {
		if len(o) != size {
			return dpcore.Invalid("nn", "gradients: output of %d, want %d", len(o), size)
		}
	}
	return nil
}

type unit struct{}

func (unit) Scale(_ int, _ []float64, _ float64, c []float64) {
	for k := range c {
		c[k] = 1
	}
}

// Forward writes the logits of the examples x (CHW each, any number) into
// logits (Classes() per example). Inputs must be finite.
func (p *Plan) Forward(x []float32, logits []float32) error {
	return p.ForwardContext(context.Background(), x, logits)
}

// ForwardContext is Forward, stopping between chunks of examples when ctx
// is done; it then returns ctx's error.
func (p *Plan) ForwardContext(ctx context.Context, x []float32, logits []float32) error {
	n := len(x) / max(1, p.net.Input.Size())
	if err := p.check(x, nil, n); err != nil {
		return err
	}
	if len(logits) != n*p.classes {
		return dpcore.Invalid("nn", "forward: %d logits for %d examples of %d classes", len(logits), n, p.classes)
	}
	p.x, p.y, p.n, p.logits, p.ctx = x, nil, n, logits, ctx
	p.run(modeForward, nil)
	p.x, p.logits, p.ctx = nil, nil, nil
	if ctx != nil && ctx.Err() != nil {
		return fmt.Errorf("nn: forward: %w", ctx.Err())
	}
	return nil
}

// run deals chunks of the current batch out to the workers (worker w
// takes chunks w, w+W, ..., so the result does not depend on scheduling)
// and, for Step, has each then sum its share of the accumulators into
// dst. One goroutine start per extra worker is the step's only
// allocation.
func (p *Plan) run(mode mode, dst []float32) {
	W := len(p.workers)
	p.chunk = min(p.opt.Chunk, (p.n+W-1)/W)
	if mode == modeAdd {
		p.chunk = p.opt.Chunk // as for the whole batch (StepAdd)
	}
	p.chunks = (p.n + p.chunk - 1) / p.chunk
	p.active = min(W, p.chunks)
	p.mode, p.dst = mode, dst
	if p.active == 1 {
		p.work(0)
		return
	}
	if mode == modeTrain {
		p.barrier.Add(p.active)
	}
	if p.opt.noPackJobs {
		p.packed.Add(p.active)
	} else {
		p.packNext.Store(0)
		for _, i := range p.packOrder {
			p.ready[i].Add(1)
		}
	}
	p.done.Add(p.active - 1)
	if p.finishes() {
		p.startEnd()
	}
	for wi := 1; wi < p.active; wi++ {
		go p.work(wi)
	}
	p.work(0)
	p.awaitWorkers()
	p.dst = nil
}

type mode uint8

const (
	modeTrain mode = iota
	modeForward
	modeGradients
	modeAdd // StepAdd: modeTrain without clearing or reducing the accumulators
)

func (p *Plan) work(wi int) {
	w := p.workers[wi]
	if p.mode == modeTrain {
		p.startAcc(w)
	}
	switch {
	case p.active == 1:
		p.permuteShare(0, 1)
	case p.opt.noPackJobs:
		p.permuteShare(wi, p.active)
		p.packed.Done()
		p.packed.Wait()
	default:
		p.packShare()
	}
	// (StepAdd: a piece starts at a multiple of W chunks, so chunk c of
	// the piece goes to the worker chunk first/Chunk + c of the batch
	// would.)
	for c := wi; c < p.chunks; c += p.active {
		if p.ctx != nil && p.ctx.Err() != nil {
			break // the caller reports the cancellation
		}
		i0 := c * p.chunk
		m := min(p.chunk, p.n-i0)
		switch g := min(p.group, (p.chunks-1-c)/p.active+1); {
		case p.mode == modeForward:
			p.forwardChunk(w, i0, m)
		case g > 1 && p.chunk == p.opt.Chunk:
			// The worker's next g chunks, all full but the last.
			p.trainGroup(w, c, g)
			c += (g - 1) * p.active
		default:
			p.trainChunk(w, i0, m)
		}
	}
	if p.finishes() {
		p.finish(w, wi)
		if wi > 0 {
			// left first: worker 0 returns after done (awaitWorkers), so
			// no signal of this step can count for the next one.
			p.end.left.Add(-1)
			if p.opt.leaveHook != nil {
				p.opt.leaveHook(wi)
			}
			p.done.Done()
		}
		return
	}
	if p.mode == modeTrain {
		p.flushDense(w) // (StepAdd: SumInto flushes)
	}
	if p.active > 1 {
		if p.mode == modeTrain {
			p.barrier.Done()
			p.barrier.Wait()
			split := p.splits[p.active]
			p.reduce(split[wi], split[wi+1])
		}
		if wi > 0 {
			p.done.Done()
		}
		return
	}
	if p.mode == modeTrain {
		p.reduce(0, len(p.segs))
	}
}

// reduce writes the sum of the active workers' accumulators over
// segments [lo, hi) into dst, mapping the internal convolution weight
// rows back to the parameter layout.
func (p *Plan) reduce(lo, hi int) {
	p.reduceSegs(p.segs[lo:hi])
}

// splitSegments sets p.splits[W] to W+1 boundaries cutting the segments
// into W runs of about equal length, for W up to the number of workers.
func (p *Plan) splitSegments() {
	total := len(p.params)
	p.splits = make([][]int, len(p.workers)+1)
	for W := 1; W <= len(p.workers); W++ {
		b := []int{0}
		done, k := 0, 0
		for g := 1; g < W; g++ {
			for k < len(p.segs) && done < total*g/W {
				done += p.segs[k].n
				k++
			}
			b = append(b, k)
		}
		p.splits[W] = append(b, len(p.segs))
	}
}

// loadInput converts examples [i0, i0+m) from CHW to HWC into act[0],
// zeroing and flagging any with a non-finite value.
func (p *Plan) loadInput(w *worker, i0, m int) {
	in := p.net.Input
	sz := in.Size()
	hw := in.H * in.W
	for j := range m {
		src := p.x[(i0+j)*sz : (i0+j+1)*sz]
		dst := w.act[0][j*sz : (j+1)*sz]
		w.bad[j] = !allFinite(src)
		if w.bad[j] {
			clear(dst)
			continue
		}
		if in.C == 1 || hw == 1 {
			copy(dst, src)
			continue
		}
		transpose(dst, src, in.C, hw)
	}
}

// transpose writes the rows x cols matrix src into dst as cols x rows.
func transpose(dst, src []float32, rows, cols int) {
	transposeLoop(dst, rows, src, cols, rows, cols)
}

// forward runs stages [from, to) forward on the chunk's m examples.
func (p *Plan) forward(w *worker, from, to, m int) {
	for i := from; i < to; i++ {
		s := &p.stages[i]
		in, out := w.act[s.src], w.act[i+1]
		isz, osz := s.in.Size(), s.out.Size()
		switch s.kind {
		case kJoin:
			addTo(out[:m*osz], in, w.act[s.skip])
		case kConv:
			p.awaitPacked(i)
			if s.implicit {
				if !p.implicitForward(w, i, m, in, out) {
					p.biasAct(w, i, out[:m*osz])
				}
				continue
			}
			U := w.u[i]
			for j := range m {
				s.im2col(in[j*isz:(j+1)*isz], U[j*s.P*s.fi:(j+1)*s.P*s.fi])
			}
			rows := m * s.P
			w.sgemmPacked(rows, U, s.fi, &s.pw, 0, out, s.fo)
			p.biasAct(w, i, out[:rows*s.fo])
		case kDense:
			p.awaitPacked(i)
			if p.inPlace(s) {
				w.denseForward(s, s.weight(p.params), m, in, out)
			} else {
				w.sgemmPacked(m, in, s.fi, &s.pw, 0, out, s.fo)
			}
			p.biasAct(w, i, out[:m*s.fo])
		case kAvg:
			for j := range m {
				s.avgPool(in[j*isz:(j+1)*isz], out[j*osz:(j+1)*osz])
			}
		case kEmbed:
			for j := range m {
				s.emb.forward(p.params, in[j*isz:(j+1)*isz], out[j*osz:(j+1)*osz])
			}
		case kDrop:
			if p.mode == modeForward || s.rate == 0 {
				copy(out[:m*osz], in[:m*osz])
				continue
			}
			thr := uint64(s.rate * (1 << 64))
			scale := float32(1 / (1 - s.rate))
			mask := w.pre[i]
			for j := range m {
				for k := range osz {
					f := float32(0)
					if dropKeep(s.seed, p.stepCount, w.i0+j, s.index, k, thr) {
						f = scale
					}
					mask[j*osz+k] = f
					out[j*osz+k] = in[j*osz+k] * f
				}
			}
		case kNorm:
			for j := range m {
				s.normForward(p.params, in[j*isz:(j+1)*isz], out[j*osz:(j+1)*osz], w.xh[i][j*isz:(j+1)*isz], w.rstd[i][j*s.groups:(j+1)*s.groups], w.col, p.normIO(w, s, j))
			}
			if s.act != Identity && s.act != ReLU { // ReLU is fused
				p.activate(w, i, out[:m*osz])
			}
		case kPool:
			for j := range m {
				o, ost := p.outMap(w, i, j)
				s.maxPool(in[j*isz:(j+1)*isz], o, ost, w.arg[i][j*osz:(j+1)*osz])
			}
		case kFlatten:
			for j := range m {
				transpose(out[j*osz:(j+1)*osz], in[j*isz:(j+1)*isz], s.in.H*s.in.W, s.in.C) // HWC to CHW
			}
		}
	}
}

func (p *Plan) forwardChunk(w *worker, i0, m int) {
	w.i0 = i0
	p.loadInput(w, i0, m)
	p.forward(w, 0, len(p.stages), m)
	copy(p.logits[i0*p.classes:(i0+m)*p.classes], w.act[len(p.stages)][:m*p.classes])
}

// lossGrad writes each example's cross-entropy (float64 log-sum-exp) into
// p.loss and the gradient of the summed loss w.r.t. the logits into d.
func (p *Plan) lossGrad(w *worker, i0, m int) {
	C := p.classes
	logits, d := w.act[len(p.stages)], w.d[len(p.stages)]
	for j := range m {
		row, g := logits[j*C:(j+1)*C], d[j*C:(j+1)*C]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		l := mx + math.Log(s) - float64(row[p.y[i0+j]])
		if w.bad[j] || math.IsNaN(l) || math.IsInf(l, 0) {
			w.bad[j] = true
			p.loss[i0+j] = math.NaN()
			clear(g)
			continue
		}
		p.loss[i0+j] = l
		for k, v := range row {
			g[k] = float32(math.Exp(float64(v)-mx) / s)
		}
		g[p.y[i0+j]] -= 1
	}
}

// backward runs stages to-1 down to 0 backward on the chunk's m
// examples (and, in the example-major section, each example's norms
// and adds).
func (p *Plan) backward(w *worker, i0, m, to int) {
	lo := 0
	if p.exampleMajor() {
		lo = p.major
	}
	p.backwardStages(w, lo, to, 0, m)
	if lo == 0 {
		return
	}
	// The example-major section: each example through its stages, then
	// its norms, factors and scaled adds while its gradient is in cache.
	w.gpOne = !p.opt.noGpOne
	for j := range m {
		p.backwardStages(w, 0, lo, j, j+1)
		p.exampleNorms(w, i0, j)
		if p.capture == nil {
			p.exampleAdds(w, j)
		}
	}
	w.gpOne = false
}

// backwardStages runs stages to-1 down to from backward on examples [j0,
// m) of the chunk (j0 > 0 only in the example-major section,
// exampleMajor).
func (p *Plan) backwardStages(w *worker, from, to, j0, m int) {
	for i := to - 1; i >= from; i-- {
		s := &p.stages[i]
		dout := w.d[i+1]
		isz, osz := s.in.Size(), s.out.Size()
		// The input gradient goes to d[src], or through tmp when
		// another reader of the same activation has written it.
		din := w.d[s.src]
		if s.addGrad {
			din = w.tmp
		}
		switch s.kind {
		case kJoin:
			if s.gradToGp {
				p.gradIntoGp(w, s.src-1, m, dout)
			} else {
				copy(din[:m*isz], dout[:m*osz])
			}
			if s.skipToGp {
				p.gradIntoGp(w, s.skip-1, m, dout)
			} else if s.skip > 0 {
				if s.addSkip {
					add(w.d[s.skip][:m*osz], dout[:m*osz])
				} else {
					copy(w.d[s.skip][:m*osz], dout[:m*osz])
				}
			}
		case kConv:
			rows := m * s.P
			G := dout[:rows*s.fo]
			if s.implicit {
				p.implicitBackward(w, i, j0, m, G, din)
			} else {
				p.actGrad(w, i, G)
				if p.col2imRows(s) {
					p.inputGradRows(w, s, m, G, din)
				} else if s.src > 0 {
					du := w.du[:rows*s.fi]
					w.sgemmPacked(rows, G, s.fo, &s.pwt, 0, du, s.fi)
					for j := range m {
						s.col2im(du[j*s.P*s.fi:(j+1)*s.P*s.fi], din[j*isz:(j+1)*isz])
					}
				}
			}
			if p.private {
				p.convExGrads(w, i, j0, m)
			}
			if s.src == 0 {
				continue
			}
		case kDense:
			G := dout[:m*s.fo]
			p.actGrad(w, i, G)
			if s.src == 0 {
				continue
			}
			if p.inPlace(s) {
				w.denseBackward(s, s.weight(p.params), m, G, din)
				break
			}
			w.sgemmPacked(m, G, s.fo, &s.pwt, 0, din, s.fi)
		case kPool:
			if s.src == 0 {
				continue
			}
			if s.gradToGp {
				p.poolGradToGp(w, i, j0, m, dout)
				continue
			}
			for j := j0; j < m; j++ {
				di := din[j*isz : (j+1)*isz]
				clear(di)
				arg := w.arg[i][j*osz : (j+1)*osz]
				for k, g := range dout[j*osz : (j+1)*osz] {
					di[arg[k]] += g
				}
			}
		case kEmbed:
			// The first layer: no gradient w.r.t. the ids.
		case kDrop:
			if s.src == 0 {
				continue
			}
			if s.rate == 0 {
				copy(din[:m*isz], dout[:m*osz])
				continue
			}
			for k, f := range w.pre[i][:m*osz] {
				din[k] = dout[k] * f
			}
		case kAvg:
			if s.src == 0 {
				continue
			}
			for j := range m {
				s.avgPoolBack(dout[j*osz:(j+1)*osz], din[j*isz:(j+1)*isz])
			}
		case kNorm:
			// d[i+1] becomes the gradient w.r.t. the affine output (ReLU's
			// mask is fused into normBackward), and each example's affine
			// gradient lands in its w.ex row for perExample and accumulate.
			if s.act != Identity && s.act != ReLU {
				p.actGrad(w, i, dout[:m*osz])
			}
			for j := range m {
				var dx []float32
				if s.src > 0 {
					dx = din[j*isz : (j+1)*isz]
				}
				s.normBackward(p.params, dout[j*osz:(j+1)*osz], w.act[i+1][j*osz:(j+1)*osz], dx, w.xh[i][j*isz:(j+1)*isz], w.rstd[i][j*s.groups:(j+1)*s.groups], p.exGrad(w, s, j), w.col, p.normIO(w, s, j))
			}
			if s.src == 0 {
				continue
			}
		case kFlatten:
			if s.src == 0 {
				continue
			}
			for j := range m {
				transpose(din[j*isz:(j+1)*isz], dout[j*osz:(j+1)*osz], s.in.C, s.in.H*s.in.W) // CHW to HWC
			}
		}
		if s.addGrad && s.src > 0 {
			add(w.d[s.src][:m*isz], din[:m*isz])
		}
	}
}

// trainChunk runs examples [i0, i0+m) forward and backward and adds their
// (clipped) gradients into w.acc.
func (p *Plan) trainChunk(w *worker, i0, m int) {
	S := len(p.stages)
	p.startChunk(w, i0, m, S)
	p.lossGrad(w, i0, m)
	p.finishChunk(w, i0, m, S)
}

// trainGroup is trainChunk for the g chunks c0, c0+W, ... of worker w
// (W the active workers; all full but the last), each in its own slot,
// with the dense head (stages p.head on, setHead) run once over all:
// their rows follow one another in the first slot's head buffers. The
// backward passes, norms and adds take the chunks in order, as
// trainChunk would.
func (p *Plan) trainGroup(w *worker, c0, g int) {
	S, h := len(p.stages), p.head
	chunk := func(k int) (i0, m int) {
		w.use(k)
		i0 = (c0 + k*p.active) * p.chunk
		return i0, min(p.chunk, p.n-i0)
	}
	// The forward passes run last chunk first, so that the first
	// chunk's state, read back first, is the one still in cache.
	rows := 0
	for k := g - 1; k >= 0; k-- {
		i0, m := chunk(k)
		if k > 0 || p.streamAt == 0 {
			p.startChunk(w, i0, m, h)
		} else {
			// The last one streams the head's weight in (setStream).
			p.startChunk(w, i0, m, p.streamAt)
			w.gemm.PrefetchStream(p.stages[p.streamOf].weight(p.params))
			p.forward(w, p.streamAt, h, m)
			w.gemm.PrefetchStream(nil)
		}
		rows += m
	} // (ending with the first chunk's slot current)
	p.forward(w, h, S, rows)
	for k := range g {
		i0, m := chunk(k)
		p.lossGrad(w, i0, m)
	}
	w.use(0)
	p.backwardStages(w, h, S, 0, rows)
	for k := range g {
		i0, m := chunk(k)
		p.finishChunk(w, i0, m, h)
	}
	w.use(0)
}

// startChunk loads examples [i0, i0+m) into the current slot and runs
// stages [0, to) forward on them.
func (p *Plan) startChunk(w *worker, i0, m, to int) {
	w.i0 = p.first + i0 // the example's index in the batch (dropout)
	p.loadInput(w, i0, m)
	p.forward(w, 0, to, m)
}

// finishChunk runs stages [0, to) of the current slot's chunk backward
// (the loss gradient and the stages from to on done) and adds its
// (clipped) gradients into w.acc.
func (p *Plan) finishChunk(w *worker, i0, m, to int) {
	clear(w.linf[:m])
	p.backward(w, i0, m, to)
	if p.private {
		if !p.exampleMajor() { // else backward has done it
			p.perExample(w, i0, m)
		}
	} else {
		p.dropNonFinite(w, i0, m)
	}
	p.accumulate(w, m)
}

// affineIO returns example j's input rows U_j and output-gradient rows
// G_j of affine stage i.
func (w *worker) affineIO(s *stage, i, j int) (U, G []float32) {
	if s.kind == kConv {
		if !s.implicit {
			U = w.u[i][j*s.P*s.fi : (j+1)*s.P*s.fi]
		}
	} else {
		U = w.act[s.src][j*s.fi : (j+1)*s.fi]
	}
	return U, w.d[i+1][j*s.P*s.fo : (j+1)*s.P*s.fo]
}

// dropNonFinite flags examples whose layer inputs or gradients are not
// finite and zeroes their rows (0*NaN is NaN, so both U and G).
func (p *Plan) dropNonFinite(w *worker, i0, m int) {
	for j := range m {
		if !w.bad[j] {
			for i := range p.stages {
				s := &p.stages[i]
				if s.kind != kConv && s.kind != kDense && s.kind != kNorm && s.kind != kEmbed {
					continue
				}
				// A convolution's im2col rows hold the values of its
				// input activation (and zeros): scan that, 9x smaller.
				G := w.d[i+1][j*s.out.Size() : (j+1)*s.out.Size()]
				if s.implicit {
					G = w.gradView(s, i, j) // the gradient applied
				}
				in := w.act[s.src][j*s.in.Size() : (j+1)*s.in.Size()]
				if s.xpFilled {
					in = w.xp[i][j*s.xpLen() : (j+1)*s.xpLen()] // the input and zeros
				}
				if !allFinite(in) || !allFinite(G) {
					w.bad[j] = true
					break
				}
			}
		}
		if w.bad[j] {
			p.loss[i0+j] = math.NaN()
			p.zeroExample(w, j)
		}
	}
}

func (p *Plan) zeroExample(w *worker, j int) {
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind == kConv && s.implicit {
			clear(w.xp[i][j*s.xpLen() : (j+1)*s.xpLen()])
			clear(w.gpOf(i, s.gpLen(), j))
			clear(w.d[i+1][j*s.out.Size() : (j+1)*s.out.Size()])
			continue
		}
		if s.kind == kConv || s.kind == kDense {
			U, G := w.affineIO(s, i, j)
			clear(U)
			clear(G)
		}
	}
}

// colSums writes the column sums of the rows x fo matrix G into col
// (float64).
func colSums(G []float32, fo int, col []float64) {
	col = col[:fo]
	clear(col)
	chanSums(G, fo, col)
}

// perExample computes each example's per-layer squared norms (and L-inf
// norm; the convolutions' backward has materialized theirs in w.ex and
// w.sq, convExGrads), asks the clipper for factors, scales (or zeroes)
// the dense layers' G rows so that accumulate's GEMM is the book-keeping
// clipped sum, and adds the scaled convolution and norm gradients into
// the accumulator.
func (p *Plan) perExample(w *worker, i0, m int) {
	A := p.naff
	for j := range m {
		p.exampleNorms(w, i0, j)
	}
	if p.capture != nil {
		return
	}
	// Per-example gradients (convolutions, norms) are scaled and added
	// into the accumulator here: exactly the vector whose norm bound
	// holds. Layer by layer, the chunk's examples in order, so that the
	// layer's share of the accumulator stays in cache while the examples
	// are added to it. (Each entry of the sum takes the examples in the
	// same order as when accumulate added them after the chunk, so the
	// sum is the same bit for bit.)
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind != kConv && s.kind != kNorm {
			continue
		}
		if s.recompute || s.ghost {
			continue // addRecomputed, addGhost, after the chunk's norms
		}
		accW := w.acc[s.w.Offset : s.w.Offset+s.w.Len]
		accB := w.acc[s.b.Offset : s.b.Offset+s.b.Len]
		for j := range m {
			if f := w.c[j*A+s.aff]; f != 0 && !w.bad[j] {
				M := p.exGrad(w, s, j)
				addScaledDown(accW, M[:s.w.Len], f)
				addScaledDown(accB, M[s.w.Len:], f)
			}
		}
	}
	if p.capture == nil {
		p.addRecomputed(w, m)
		p.addGhost(w, m)
	}
}

// exampleNorms is perExample's first part for example j of the chunk:
// its per-layer squared norms (and L-inf norm), its factors from the
// clipper, and its dense layers' G rows scaled (or zeroed); with
// Gradients, its gradient captured instead.
func (p *Plan) exampleNorms(w *worker, i0, j int) {
	A := p.naff
	sq := w.sq[j*A : (j+1)*A]
	linf := 0.0
	for i := range p.stages {
		s := &p.stages[i]
		switch s.kind {
		case kConv:
			// convExGrads has written the gradient (or, recomputed,
			// its bias), its squared norm into sq and its L-inf norm
			// into w.linf[j].
			linf = max(linf, w.linf[j])
		case kEmbed:
			sz, osz := s.in.Size(), s.out.Size()
			t := 0.0
			s.emb.grads(w.act[0][j*sz:(j+1)*sz], w.d[i+1][j*osz:(j+1)*osz], w.col, w.vec, func(_ EmbeddingTable, _ int, vec []float32) {
				t += sumsq64(vec)
				if p.opt.LInf {
					linf = max(linf, maxAbs(vec))
				}
			})
			sq[s.aff] = t
		case kNorm:
			M := p.exGrad(w, s, j)
			sq[s.aff] = sumsq64(M)
			if p.opt.LInf {
				linf = max(linf, maxAbs(M))
			}
		case kDense:
			U, G := w.affineIO(s, i, j)
			gg := sumsq64(G)
			// The weight gradient is the outer product u g^T: each
			// entry one float32 product, its squared norm
			// ||u||^2 ||g||^2 up to float64 rounding.
			sq[s.aff] = sumsq64(U) * gg
			if s.b.Len > 0 {
				sq[s.aff] += gg
			}
			if p.opt.LInf {
				mg := maxAbs(G)
				linf = max(linf, maxAbs(U)*mg)
				if s.b.Len > 0 {
					linf = max(linf, mg)
				}
			}
		}
	}
	if w.bad[j] {
		for k := range sq {
			sq[k] = math.NaN()
		}
	}
	for _, v := range sq {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			w.bad[j] = true
		}
	}
	if w.bad[j] {
		p.loss[i0+j] = math.NaN()
		for k := range sq {
			sq[k] = math.NaN()
		}
	}
	c := w.c[j*A : (j+1)*A]
	p.clip.Scale(i0+j, sq, linf, c)
	if p.capture != nil {
		p.captureExample(w, j, p.capture[i0+j])
		return
	}
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind != kDense {
			continue
		}
		U, G := w.affineIO(s, i, j)
		// Every kept example is scaled, clipped or not (a factor of 1
		// leaves each entry as it is), so that the work does not
		// depend on whether the example was clipped.
		if f := c[s.aff]; f == 0 || w.bad[j] {
			clear(U)
			clear(G)
		} else {
			scaleDown(f, G)
		}
	}
}

// exampleAdds adds example j's scaled convolution and norm gradients
// into the accumulator (perExample's second part, for one example: each
// entry of the sum still takes the examples in order).
func (p *Plan) exampleAdds(w *worker, j int) {
	A := p.naff
	if w.bad[j] {
		return
	}
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind != kConv && s.kind != kNorm || s.recompute {
			continue
		}
		if f := w.c[j*A+s.aff]; f != 0 {
			M := p.exGrad(w, s, j)
			addScaledDown(w.acc[s.w.Offset:s.w.Offset+s.w.Len], M[:s.w.Len], f)
			addScaledDown(w.acc[s.b.Offset:s.b.Offset+s.b.Len], M[s.w.Len:], f)
		}
	}
}

// convExGrads writes the per-example gradients of convolution stage i
// (weight, then bias) for examples [j0, m) of the chunk into their w.ex
// rows,
// their squared norms into w.sq and, with Options.LInf, raises w.linf[j]
// to their L-inf norms. backward calls it right after the stage's own
// backward pass, while the output gradients it reads are in cache.
func (p *Plan) convExGrads(w *worker, i, j0, m int) {
	s := &p.stages[i]
	for j := j0; j < m; j++ {
		U, G := w.affineIO(s, i, j)
		if s.ghost && p.capture == nil {
			X := w.act[s.src][j*s.in.Size() : (j+1)*s.in.Size()]
			w.sq[j*p.naff+s.aff], w.gr[j*p.naff+s.aff] = p.ghostNorm(w, s, X, U, G, p.exBias(w, s, j))
			continue
		}
		if s.recompute && p.capture == nil {
			var l float64
			w.sq[j*p.naff+s.aff], l = p.recomputedNorm(w, s, U, G, p.exBias(w, s, j))
			w.linf[j] = max(w.linf[j], l)
			continue
		}
		M := p.exGrad(w, s, j)
		if s.implicit {
			p.implicitWeightGrad(w, i, j, 0, M)
			G = w.gradView(s, i, j)
		} else {
			w.sgemm(gblas.Trans, gblas.NoTrans, s.fi, s.fo, s.P, 1, U, s.fi, G, s.fo, 0, M, s.fo)
		}
		if s.b.Len > 0 {
			colSums(G, s.fo, w.col)
			for k, v := range w.col[:s.fo] {
				M[s.fi*s.fo+k] = float32(v)
			}
		}
		w.sq[j*p.naff+s.aff] = sumsq64(M)
		if p.opt.LInf {
			w.linf[j] = max(w.linf[j], maxAbs(M))
		}
	}
}

// exGrad is example j's gradient of stage s (a norm, or a convolution on
// the private path: weight, then bias) in w.ex.
func (p *Plan) exGrad(w *worker, s *stage, j int) []float32 {
	if s.recompute || s.ghost { // Gradients only
		return w.capEx[j*p.capLen+s.capOff : j*p.capLen+s.capOff+s.w.Len+s.b.Len]
	}
	if p.major > 0 {
		j = 0 // one example's buffer (setMajor)
	}
	return w.ex[j*p.exLen+s.exOff : j*p.exLen+s.exOff+s.w.Len+s.b.Len]
}

// exBias is example j's bias gradient of convolution stage s in w.ex
// (private path).
func (p *Plan) exBias(w *worker, s *stage, j int) []float32 {
	if s.recompute || s.ghost {
		return w.ex[j*p.exLen+s.exOff : j*p.exLen+s.exOff+s.b.Len]
	}
	return p.exGrad(w, s, j)[s.w.Len:]
}

// factor is example j's clipping factor for affine layer aff (1 on the
// non-private path) and whether its gradient enters the sum at all.
func (p *Plan) factor(w *worker, j, aff int) (float64, bool) {
	f := 1.0
	if p.private {
		f = w.c[j*p.naff+aff]
	}
	return f, f != 0 && !w.bad[j]
}

// captureExample writes example j's gradient into out.
func (p *Plan) captureExample(w *worker, j int, out []float32) {
	for i := range p.stages {
		s := &p.stages[i]
		switch s.kind {
		case kConv:
			M := p.exGrad(w, s, j)
			for r, e := range s.perm {
				copy(out[s.w.Offset+int(e)*s.fo:s.w.Offset+(int(e)+1)*s.fo], M[r*s.fo:(r+1)*s.fo])
			}
			copy(out[s.b.Offset:s.b.Offset+s.b.Len], M[s.fi*s.fo:])
		case kEmbed:
			for _, t := range s.emb.Tables {
				clear(out[t.Weight.Offset : t.Weight.Offset+t.Weight.Len])
			}
			sz, osz := s.in.Size(), s.out.Size()
			s.emb.grads(w.act[0][j*sz:(j+1)*sz], w.d[i+1][j*osz:(j+1)*osz], w.col, w.vec, func(t EmbeddingTable, id int, vec []float32) {
				copy(out[t.Weight.Offset+id*t.Dim:t.Weight.Offset+(id+1)*t.Dim], vec)
			})
		case kNorm:
			M := p.exGrad(w, s, j)
			copy(out[s.w.Offset:s.w.Offset+s.w.Len], M[:s.w.Len])
			copy(out[s.b.Offset:s.b.Offset+s.b.Len], M[s.w.Len:])
		case kDense:
			U, G := w.affineIO(s, i, j)
			W := out[s.w.Offset : s.w.Offset+s.w.Len]
			for a, u := range U {
				for b, g := range G {
					W[a*s.fo+b] = u * g
				}
			}
			copy(out[s.b.Offset:s.b.Offset+s.b.Len], G)
		}
	}
}

// denseGroup is the number of examples whose dense weight gradients
// accumulate gathers before it adds them into w.acc in one product
// (flushDense): the accumulator of CIFAR's 2048x128 layer (1 MiB) is
// then read once per group rather than once per chunk. deferWeights is
// the least weight count of a dense layer so treated: smaller
// accumulators stay in cache between chunks, and their sums keep the
// rounding of one product per chunk.
const (
	denseGroup   = 64
	deferWeights = 1 << 16
)

// deferred reports whether accumulate gathers the rows of stage s
// (flushDense).
func (p *Plan) deferred(s *stage) bool {
	least := deferWeights
	if p.opt.deferMin > 0 {
		least = p.opt.deferMin
	}
	return s.kind == kDense && !p.opt.noDeferDense && s.w.Len >= least
}

// flushDense adds the weight gradients of the deferred dense layers'
// gathered rows (the w.dn examples since the last flush, in order) into
// w.acc: one book-keeping product U^T G per layer (overwriting, when
// w.acc's deferred weights were not cleared this step: denseBeta).
func (p *Plan) flushDense(w *worker) {
	if w.dn == 0 {
		return
	}
	for i := range p.stages {
		s := &p.stages[i]
		if w.dU[i] == nil {
			continue
		}
		w.flushProduct(s, i, denseBeta(w.accDense), w.acc[s.w.Offset:s.w.Offset+s.w.Len])
	}
	w.dn, w.accDense = 0, true
}

// flushProduct writes U^T G + beta C into c for deferred dense stage s
// (index i): the book-keeping product of the w.dn rows gathered since
// the last flush.
func (w *worker) flushProduct(s *stage, i int, beta float32, c []float32) {
	w.sgemm(gblas.Trans, gblas.NoTrans, s.fi, s.fo, w.dn, 1, w.dU[i], s.fi, w.dG[i], s.fo, beta, c, s.fo)
}

// accumulate adds the chunk's gradients into w.acc: book-keeping GEMMs
// U^T G over the chunk for dense layers (and for convolutions on the
// non-private path), the scaled per-example convolution gradients on the
// private path.
func (p *Plan) accumulate(w *worker, m int) {
	if p.capture != nil {
		return
	}
	if w.dU != nil && w.dn+m > max(p.opt.Chunk, denseGroup) {
		p.flushDense(w)
	}
	for i := range p.stages {
		s := &p.stages[i]
		if s.kind == kEmbed {
			sz, osz := s.in.Size(), s.out.Size()
			for j := range m {
				f, ok := p.factor(w, j, s.aff)
				if !ok {
					continue
				}
				s.emb.grads(w.act[0][j*sz:(j+1)*sz], w.d[i+1][j*osz:(j+1)*osz], w.col, w.vec, func(t EmbeddingTable, id int, vec []float32) {
					scaleDown(f, vec)
					add(w.acc[t.Weight.Offset+id*t.Dim:t.Weight.Offset+(id+1)*t.Dim], vec)
				})
			}
			continue
		}
		if s.kind != kConv && s.kind != kDense && s.kind != kNorm {
			continue
		}
		accW := w.acc[s.w.Offset : s.w.Offset+s.w.Len]
		accB := w.acc[s.b.Offset : s.b.Offset+s.b.Len]
		if (s.kind == kNorm || s.kind == kConv) && p.private {
			continue // perExample has added the scaled per-example gradients
		}
		if s.kind == kNorm {
			// Per-example gradients materialized by backward (small, 2
			// per channel or feature).
			for j := range m {
				if _, ok := p.factor(w, j, s.aff); !ok {
					continue
				}
				M := p.exGrad(w, s, j)
				add(accW, M[:s.w.Len])
				add(accB, M[s.w.Len:])
			}
			continue
		}
		rows := m * s.P
		var U []float32
		if s.implicit {
			for j := range m {
				p.implicitWeightGrad(w, i, j, 1, accW)
			}
		} else if s.kind == kConv {
			U = w.u[i][:rows*s.fi]
		} else {
			U = w.act[s.src][:rows*s.fi]
		}
		G := w.d[i+1][:rows*s.fo]
		if s.kind == kConv && !s.implicit {
			p.sumProduct(w, s, i, m)
		} else if w.dU != nil && w.dU[i] != nil {
			copy(w.dU[i][w.dn*s.fi:], U)
			copy(w.dG[i][w.dn*s.fo:], G)
		} else if !s.implicit {
			w.sgemm(gblas.Trans, gblas.NoTrans, s.fi, s.fo, rows, 1, U, s.fi, G, s.fo, 1, accW, s.fo)
		}
		if s.b.Len == 0 {
			continue
		}
		if s.implicit {
			clear(w.col[:s.fo])
			for j := range m {
				chanSums(w.gradView(s, i, j), s.fo, w.col[:s.fo])
			}
		} else {
			colSums(G, s.fo, w.col)
		}
		for k, v := range w.col[:s.fo] {
			accB[k] += float32(v)
		}
	}
	if w.dU != nil {
		w.dn += m
	}
}
