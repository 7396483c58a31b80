package mfnoise

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"gonum.org/v1/gonum/mat"
)

// Mechanism is a correlated-noise mechanism: a value that builds its
// strategy A = B C for a workload (SPEC 5). Each family is a type of this
// package (DPSGD, Tree, FFT, MFSingle, MFKB, BandMF, Sqrt, BandedSqrt,
// BandedToeplitz, BLT, BISR, Stamped); the planner (package privacy) reads
// only this method set, and names exist only in privacy.ParseMechanism.
type Mechanism interface {
	// String is the canonical name, e.g. "bandmf:8/s2".
	String() string
	// Structure is what the privacy rules rely on, known without building.
	Structure() Structure
	// Build makes the strategy for workload w; schema is the participation
	// the sampler realizes (optimizers read it; every other family only
	// validates it against w.N).
	Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error)
}

// Structure is the part of a mechanism the planner's rules read.
type Structure struct {
	// Independent says C = I: DP-SGD's independent noise. The encoder does
	// not depend on the workload, so the planner factorizes prefix sums.
	Independent bool
	// Bands is b for an encoder that is square, lower triangular and
	// b-banded (C[i,j] = 0 for i-j >= b; 1 for DP-SGD), 0 for a dense or
	// tall one. Only a banded encoder can be accounted with amplification
	// (banded-MF Thm 4), and only with at least b partitions.
	Bands int
	// AutoBands says the encoder is banded with a band count the planner
	// chooses (bandmf:auto, toeplitz:auto; the mechanism is an
	// AutoBanded): by amplified accounting under band sampling, by the
	// loss under the sampler's schema under fixed-order or shuffling.
	AutoBands bool
	// FixedOrderOnly says the encoder was optimized for (k,b)-participation,
	// which only fixed-order epochs realize.
	FixedOrderOnly bool
}

// AutoBanded is a banded mechanism whose band count the planner chooses
// (bandmf:auto, toeplitz:auto). Built by itself, it uses the most bands
// the schema's sensitivity allows without overlap: min(b, n) under (k,b)
// and min-sep, n under single participation.
type AutoBanded interface {
	Mechanism
	// WithBands is the same family with b bands.
	WithBands(b int) Mechanism
}

// Blocked is a mechanism with a dense block builder: it can be stamped
// (Stamped) and is built densely by BuildDense.
type Blocked interface {
	Mechanism
	// BuildBlock makes the dense factorization for the block workload w0
	// (the whole workload when not stamped) and, when its structure gives
	// one cheaply, the Gram matrix C^T C (else nil); schema is the whole
	// run's participation.
	BuildBlock(ctx context.Context, w0 dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (*Factorization, *mat.SymDense, error)
	// StampDecoder is the decoder that suits the family when stamped.
	StampDecoder() StampDecoder
}

// Coster is a mechanism that knows what streaming its noise costs (SPEC
// 6); Compare costs every other one as a dense encoder.
type Coster interface {
	// NoiseCost is the number of d-vectors the noise source keeps per
	// coordinate and the complexity class of one step, for strategy s
	// built by the mechanism with the given number of stamps.
	NoiseCost(s dpcore.Strategy, stamps int) (perCoord float64, stepTime string)
}

// denseCost is the streaming cost of a dense encoder's noise (SPEC 6),
// per coordinate of the model: the band count when the factorization
// declares its encoder banded (Meta.Bands), else one d-vector per step of
// a block.
func denseCost(s dpcore.Strategy, stamps int) (float64, string) {
	if f, ok := s.(*Factorization); ok && f.Meta.Bands > 0 {
		return bandedCost(s, stamps)
	}
	n0, _ := blockDims(s, stamps)
	return float64(n0), "O(n d)"
}

// bandedCost is the streaming cost of a banded encoder's noise: its band
// count read off the encoder within a block (b = max_i (i - first nonzero
// column of row i) + 1).
func bandedCost(s dpcore.Strategy, stamps int) (float64, string) {
	if b, ok := s.(*BandedStrategy); ok {
		return float64(b.Encoder.bandsUsed()), "O(b d)"
	}
	n0, _ := blockDims(s, stamps)
	c, _, err := s.Matrices()
	if err != nil {
		return float64(n0), "O(n d)"
	}
	lo, hi, _ := linalg.RowSpans(c)
	bands := 1
	for i := range lo {
		if hi[i] > lo[i] {
			bands = max(bands, i%max(n0, 1)-lo[i]%max(n0, 1)+1)
		}
	}
	return float64(bands), "O(b d)"
}

// blockDims are the steps n0 and encoder rows m0 of one block of a dense
// strategy stamped stamps times.
func blockDims(s dpcore.Strategy, stamps int) (n0, m0 int) {
	stamps = max(stamps, 1)
	n0 = s.Steps() / stamps
	if f, ok := s.(*Factorization); ok {
		m, _ := f.Encoder.Dims()
		return n0, m / stamps
	}
	return n0, n0
}

// BuildOptions configures building and Compare.
type BuildOptions struct {
	// Cache stores optimized factorizations so an expensive optimization
	// runs once; nil means no caching. Closed forms are never cached: they
	// build in well under a second at n = 2000.
	Cache *Cache
	// Optimize tunes the optimizers (mf-single, mf-kb, bandmf); nil means
	// their defaults.
	Optimize *optimize.Settings
}

// BuildDense builds m's dense factorization: a Blocked mechanism's block
// builder over the whole workload, any other's strategy made dense
// (refused above dpcore.DenseStepLimit).
func BuildDense(ctx context.Context, m Mechanism, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (*Factorization, error) {
	if b, ok := m.(Blocked); ok {
		f, _, err := buildBlocks(ctx, b, 1, m.String(), w, schema, opt)
		return f, err
	}
	s, err := m.Build(ctx, w, schema, opt)
	if err != nil {
		return nil, err
	}
	return Dense(s)
}

// denseMatrices is how many n x n float64 matrices a dense build holds at
// its peak (workload, encoder, decoder, Gram matrix, product check).
const denseMatrices = 5

// optimizedFamily is a mechanism whose dense build runs an optimizer
// holding more work matrices than denseMatrices.
type optimizedFamily interface {
	workMatrices() int
}

// peakMatrices is how many n x n float64 matrices building m holds at its
// peak: its optimizer's work matrices, or denseMatrices. A refusal above
// dpcore.DenseStepLimit states that memory (mf-kb at n = 10,000: 44
// matrices, 33 GiB, where the build alone would say 3.7 GiB).
func peakMatrices(m any) int {
	if o, ok := m.(optimizedFamily); ok {
		return max(denseMatrices, o.workMatrices())
	}
	return denseMatrices
}

// buildBlocks builds m densely over w in the given number of stamps
// (1: not stamped), with the Gram matrix when the family gives one.
func buildBlocks(ctx context.Context, m Blocked, stamps int, name string, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (*Factorization, *mat.SymDense, error) {
	matrices := denseMatrices
	if stamps == 1 {
		matrices = peakMatrices(m) // stamped, the optimizer works on a block
	}
	if err := guard.Dense("build "+name, w.N, matrices); err != nil {
		return nil, nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, nil, err
	}
	if err := schema.Validate(w.N); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: build %s: %w", name, err)
	}
	if stamps < 1 || w.N%stamps != 0 {
		return nil, nil, guard.Invalidf("build %s: %d stamps do not divide n = %d steps", name, stamps, w.N)
	}
	block := func(w0 dpcore.Workload) (*Factorization, *mat.SymDense, error) {
		return m.BuildBlock(ctx, w0, schema, opt)
	}
	if stamps == 1 {
		return block(w)
	}
	return stamp(w, stamps, block, m.StampDecoder())
}

// buildGram is the strategy of a Blocked mechanism built unstamped: its
// dense factorization, carrying the Gram matrix its structure gives for
// Compare's sensitivity.
func buildGram(ctx context.Context, m Blocked, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	f, x, err := buildBlocks(ctx, m, 1, m.String(), w, schema, opt)
	if err != nil {
		return nil, err
	}
	return withGram(f, x), nil
}

// withGram returns f carrying the structured Gram matrix x (nil: none).
func withGram(f *Factorization, x *mat.SymDense) *Factorization {
	if x == nil || f == nil {
		return f
	}
	g := *f
	g.gram = x
	return &g
}
