package mfnoise

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// toeplitzPrelude validates what every Toeplitz family's Build needs:
// n within dpcore.StructuredStepLimit, a workload whose learning rates are known,
// the schema and the context. It returns the workload the optimizers
// optimize for: w itself, or under a time-varying schedule (cooldown) the
// same momentum at a constant rate, since the optimizers need a Toeplitz
// workload (the mechanism still serves, and is scored on, w itself).
func toeplitzPrelude(ctx context.Context, name string, w dpcore.Workload, schema dpcore.Schema) (dpcore.Workload, error) {
	if err := guard.Steps(w.N); err != nil {
		return dpcore.Workload{}, err
	}
	ow, err := toeplitz.ProxyWorkload(w)
	if err != nil {
		return dpcore.Workload{}, err
	}
	if err := schema.Validate(w.N); err != nil {
		return dpcore.Workload{}, err
	}
	if err := ctx.Err(); err != nil {
		return dpcore.Workload{}, fmt.Errorf("mfnoise: build %s: %w", name, err)
	}
	return ow, nil
}

// The Toeplitz families are built in O(n) memory as *toeplitz.Strategy
// (package toeplitz): sqrt and bisr in closed form, toeplitz:BANDS and
// blt:NBUF by Optimize's ToeplitzFamily and BLTFamily (total loss over w.N steps under the schema),
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
	return closedForm(ctx, m.String(), w, schema, func() (*toeplitz.Encoder, error) { return toeplitz.Sqrt(w.N) })
}

// NoiseCost of the square root: n rows.
func (Sqrt) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// BandedToeplitz is banded Toeplitz with Bands optimized coefficients
// (toeplitz:BANDS; ToeplitzFamily): its encoder is banded, so band
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
		return nil, guard.Invalidf("build %s: %d bands, need 1..n = %d", m, bands, w.N)
	}
	t, err := optimizedToeplitz(ctx, m.String(), "toeplitz", bands, ToeplitzFamily{Bands: bands}, ow, w.N, schema, opt)
	if err != nil {
		return nil, err
	}
	return t.For(w)
}

// NoiseCost: the band count.
func (BandedToeplitz) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// BLT is the buffered linear Toeplitz mechanism with Buffers buffers
// (blt:NBUF; McMahan et al. 2024, BLTFamily): O(NBUF d) noise memory.
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
	t, err := optimizedToeplitz(ctx, m.String(), "blt", m.Buffers, BLTFamily{Buffers: m.Buffers}, ow, w.N, schema, opt)
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
	return closedForm(ctx, m.String(), w, schema, func() (*toeplitz.Encoder, error) { return toeplitz.BandedInverseSqrt(w.N, m.Bands) })
}

// NoiseCost: the bands of the inverse.
func (BISR) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }

// closedForm is the strategy of a closed-form Toeplitz family: the
// prelude's checks, then the encoder mk makes, bound to w.
func closedForm(ctx context.Context, name string, w dpcore.Workload, schema dpcore.Schema, mk func() (*toeplitz.Encoder, error)) (dpcore.Strategy, error) {
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
	t, ok := s.(*toeplitz.Strategy)
	if !ok {
		return float64(s.Steps()), "O(n d)"
	}
	if t.Encoder.BLT != nil {
		return float64(t.Encoder.NoiseMemoryPerCoord()), "O(nbuf d)"
	}
	return float64(t.Encoder.NoiseMemoryPerCoord()), "O(b d)"
}

// optimizedToeplitz runs Optimize for family (kind "toeplitz" with size
// bands, "blt" with size buffers) for workload ow under the schema,
// through opt.Cache and under the context's BuildTrace, and checks that
// the result serves n steps.
func optimizedToeplitz(ctx context.Context, name, kind string, size int, family Family,
	ow dpcore.Workload, n int, schema dpcore.Schema, opt BuildOptions) (*toeplitz.Encoder, error) {
	key := ProblemKey{Kind: kind, Workload: ow, Schema: schema, Bands: size, Stamps: 1}
	tr := buildTraceFrom(ctx)
	label := kind + ":" + strconv.Itoa(size) // e.g. toeplitz:8, blt:4
	t, hit, err := opt.Cache.getOrBuildToeplitz(ctx, key, func(ctx context.Context) (*toeplitz.Encoder, error) {
		res, err := tr.optimize(label, ow.N, 0, func(progress func(optimize.Progress)) (*Result, error) {
			return Optimize(ctx, Problem{Workload: ow, Schema: schema, Family: family}, &optimize.Settings{Progress: progress})
		})
		if err != nil {
			return nil, err
		}
		return res.Toeplitz, nil
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
func checkLoaded(t *toeplitz.Encoder, n int) (*toeplitz.Encoder, error) {
	if t == nil || t.N != n {
		return nil, fmt.Errorf("mfnoise: cache: %w: a Toeplitz entry is not for n = %d steps", ErrCorrupt, n)
	}
	return t, nil
}
