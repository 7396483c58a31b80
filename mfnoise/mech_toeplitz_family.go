package mfnoise

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// denseMatrices is how many n x n float64 matrices a dense build holds at
// its peak (workload, encoder, decoder, Gram matrix, product check).
const denseMatrices = 5

// checkDense refuses a dense build of n steps above dpcore.DenseStepLimit.
func checkDense(name string, n, matrices int) error {
	if n > dpcore.DenseStepLimit {
		return invalidf("%s: n = %d steps needs dense n x n matrices, about %s (%d x 8 n^2 bytes); the limit is n = %d (the Toeplitz mechanisms dpsgd, sqrt, toeplitz:BANDS, blt:NBUF and bisr:BANDS have none)",
			name, n, humanBytes(float64(matrices)*8*float64(n)*float64(n)), matrices, dpcore.DenseStepLimit)
	}
	return nil
}

// toeplitzPrelude validates what every Toeplitz family's Build needs:
// n within MaxStructuredSteps, a workload whose learning rates are known,
// the schema and the context. It returns the workload the optimizers
// optimize for: w itself, or under a time-varying schedule (cooldown) the
// same momentum at a constant rate, since the optimizers need a Toeplitz
// workload (the mechanism still serves, and is scored on, w itself).
func toeplitzPrelude(ctx context.Context, name string, w dpcore.Workload, schema dpcore.Schema) (dpcore.Workload, error) {
	if err := checkSteps(w.N); err != nil {
		return dpcore.Workload{}, err
	}
	eta, err := workloadRates(w)
	if err != nil {
		return dpcore.Workload{}, err
	}
	ow := w
	if eta != nil && !constantRates(eta) {
		ow = dpcore.Workload{Kind: dpcore.MomentumKind, N: w.N, Momentum: w.Momentum, Schedule: dpcore.ConstantSchedule(1)}
	}
	if err := schema.Validate(w.N); err != nil {
		return dpcore.Workload{}, err
	}
	if err := ctx.Err(); err != nil {
		return dpcore.Workload{}, fmt.Errorf("mfnoise: build %s: %w", name, err)
	}
	return ow, nil
}

// The Toeplitz families are built in O(n) memory as *ToeplitzStrategy:
// sqrt and bisr in closed form, toeplitz:BANDS by OptimizeToeplitz and
// blt:NBUF by OptimizeBLT (total loss over w.N steps under the schema),
// the optimized ones kept in BuildOptions.Cache (their coefficients only).
// They are not stamped (their structure already streams in O(n) memory).

// Sqrt is the Toeplitz square root of the prefix sum, C = S^(1/2)
// (Fichtenberger et al. 2023).
type Sqrt struct{}

func (Sqrt) String() string { return "sqrt" }

// Structure: a dense lower-triangular encoder.
func (Sqrt) Structure() Structure { return Structure{} }

// Build is the closed form.
func (m Sqrt) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, _ BuildOptions) (dpcore.Strategy, error) {
	return closedForm(ctx, m.String(), w, schema, func() (*Toeplitz, error) { return SqrtToeplitz(w.N) })
}

// NoiseCost of the square root: n rows.
func (Sqrt) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// BandedToeplitz is banded Toeplitz with Bands optimized coefficients
// (toeplitz:BANDS; OptimizeToeplitz): its encoder is banded, so band
// sampling and amplified accounting apply. With Auto (toeplitz:auto) the
// planner chooses the band count.
type BandedToeplitz struct {
	Bands int
	Auto  bool
}

func (m BandedToeplitz) String() string { return bandsName("toeplitz", m.Bands, m.Auto) }

// Structure: b-banded, or banded with the planner's count.
func (m BandedToeplitz) Structure() Structure { return bandsStructure(m.Bands, m.Auto) }

// WithBands is BandedToeplitz with b bands.
func (BandedToeplitz) WithBands(b int) Mechanism { return BandedToeplitz{Bands: b} }

// Build optimizes the coefficients (through the cache).
func (m BandedToeplitz) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	ow, err := toeplitzPrelude(ctx, m.String(), w, schema)
	if err != nil {
		return nil, err
	}
	bands := m.Bands
	if m.Auto {
		// As bandmf:auto: the most bands the schema's sensitivity allows
		// without overlap (the planner chooses by its own rule instead:
		// privacy's band choice).
		bands = w.N
		if schema.Kind != dpcore.Single {
			bands = min(schema.B, w.N)
		}
	}
	if bands < 1 || bands > w.N {
		return nil, invalidf("build %s: %d bands, need 1..n = %d", m, bands, w.N)
	}
	t, err := optimizedToeplitz(ctx, m.String(), "toeplitz", bands, OptimizeToeplitz, ow, w.N, schema, opt)
	if err != nil {
		return nil, err
	}
	return t.For(w)
}

// NoiseCost: the band count.
func (BandedToeplitz) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// BLT is the buffered linear Toeplitz mechanism with Buffers buffers
// (blt:NBUF; McMahan et al. 2024, OptimizeBLT): O(NBUF d) noise memory.
type BLT struct{ Buffers int }

func (m BLT) String() string { return "blt:" + strconv.Itoa(m.Buffers) }

// Structure: a dense lower-triangular encoder.
func (BLT) Structure() Structure { return Structure{} }

// Build optimizes the BLT parameters (through the cache).
func (m BLT) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	ow, err := toeplitzPrelude(ctx, m.String(), w, schema)
	if err != nil {
		return nil, err
	}
	t, err := optimizedToeplitz(ctx, m.String(), "blt", m.Buffers, OptimizeBLT, ow, w.N, schema, opt)
	if err != nil {
		return nil, err
	}
	return t.For(w)
}

// NoiseCost: the buffers and the output.
func (BLT) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// BISR is the banded inverse square root (bisr:BANDS; Kalinin and Lampert
// 2024): C^-1 is the square root's inverse truncated to Bands bands, so
// the encoder's inverse is banded, not the encoder.
type BISR struct{ Bands int }

func (m BISR) String() string { return "bisr:" + strconv.Itoa(m.Bands) }

// Structure: a dense lower-triangular encoder (its inverse is banded).
func (BISR) Structure() Structure { return Structure{} }

// Build is the closed form.
func (m BISR) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, _ BuildOptions) (dpcore.Strategy, error) {
	return closedForm(ctx, m.String(), w, schema, func() (*Toeplitz, error) { return BandedInverseSqrt(w.N, m.Bands) })
}

// NoiseCost: the bands of the inverse.
func (BISR) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// closedForm is the strategy of a closed-form Toeplitz family: the
// prelude's checks, then the encoder mk makes, bound to w.
func closedForm(ctx context.Context, name string, w dpcore.Workload, schema dpcore.Schema, mk func() (*Toeplitz, error)) (dpcore.Strategy, error) {
	if _, err := toeplitzPrelude(ctx, name, w, schema); err != nil {
		return nil, err
	}
	t, err := mk()
	if err != nil {
		return nil, err
	}
	return t.For(w)
}

// toeplitzCost is what streaming a Toeplitz strategy's noise costs.
func toeplitzCost(s dpcore.Strategy) (float64, string) {
	t, ok := s.(*ToeplitzStrategy)
	if !ok {
		return float64(s.Steps()), "O(n d)"
	}
	if t.Toeplitz.BLT != nil {
		return float64(t.Toeplitz.NoiseMemoryPerCoord()), "O(nbuf d)"
	}
	return float64(t.Toeplitz.NoiseMemoryPerCoord()), "O(b d)"
}

// optimizedToeplitz runs run (OptimizeToeplitz with size bands,
// OptimizeBLT with size buffers) for workload ow under the schema, through
// opt.Cache and under the context's BuildTrace, and checks that the result
// serves n steps.
func optimizedToeplitz(ctx context.Context, name, kind string, size int,
	run func(context.Context, dpcore.Workload, dpcore.Schema, int, ToeplitzProblem, *optimize.Settings) (*ToeplitzResult, error),
	ow dpcore.Workload, n int, schema dpcore.Schema, opt BuildOptions) (*Toeplitz, error) {
	key := ProblemKey{Kind: kind, Workload: ow, Schema: schema, Bands: size, Stamps: 1}
	tr := buildTraceFrom(ctx)
	label := kind + ":" + strconv.Itoa(size) // e.g. toeplitz:8, blt:4
	t, hit, err := opt.Cache.getOrBuildToeplitz(ctx, key, func(ctx context.Context) (*Toeplitz, error) {
		var res *ToeplitzResult
		err := tr.optimize(label, ow.N, 0, func(progress func(optimize.Progress)) error {
			var err error
			res, err = run(ctx, ow, schema, size, ToeplitzProblem{}, &optimize.Settings{Progress: progress})
			return err
		})
		if err != nil {
			return nil, err
		}
		return res.Mechanism, nil
	})
	if err != nil {
		return nil, prefixf(err, "build %s", name)
	}
	if hit {
		tr.cached(label, ow.N, opt.Cache.Dir)
	}
	return checkLoaded(t, n)
}

// checkLoaded refuses a built or cached mechanism that is not for n steps.
func checkLoaded(t *Toeplitz, n int) (*Toeplitz, error) {
	if t == nil || t.N != n {
		return nil, fmt.Errorf("mfnoise: cache: %w: a Toeplitz entry is not for n = %d steps", ErrCorrupt, n)
	}
	return t, nil
}
