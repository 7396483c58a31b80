package mfnoise

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"gonum.org/v1/gonum/mat"
)

// The optimized dense families: their encoders come from an optimizer
// (opt_*.go), kept in BuildOptions.Cache under a ProblemKey whose Kind is
// the family's name ("mf-single", "mf-kb", "bandmf": the names cache
// files were written with).

// MFSingle is the optimal single-participation factorization (Denisov et
// al. 2022; SingleFamily).
type MFSingle struct{}

func (MFSingle) String() string { return "mf-single" }

// Structure: a dense encoder.
func (MFSingle) Structure() Structure { return Structure{} }

// Build optimizes for w.
func (m MFSingle) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	return BuildDense(ctx, m, w, schema, opt)
}

// BuildBlock optimizes for w0 (through the cache).
func (m MFSingle) BuildBlock(ctx context.Context, w0 dpcore.Workload, _ dpcore.Schema, opt BuildOptions) (*Factorization, *mat.SymDense, error) {
	key := ProblemKey{Kind: "mf-single", Stamps: 1}
	f, err := optimized(ctx, m.String(), "mf-single", key, w0, SingleFamily{}, opt, opt.Optimize.GapOrDefault())
	return f, nil, err
}

// StampDecoder: the optimal decoder.
func (MFSingle) StampDecoder() StampDecoder { return StampOptimal }

func (MFSingle) workMatrices() int { return singleMatrices }

// MFKB is the optimal factorization for the sampler's (k,b)-participation
// (multi-epoch paper; KBFamily); only fixed-order epochs realize that
// schema. Stamped, it is optimized for (ceil((n/S)/b), b) within a block.
type MFKB struct{}

func (MFKB) String() string { return "mf-kb" }

// Structure: dense, for fixed-order epochs only.
func (MFKB) Structure() Structure { return Structure{FixedOrderOnly: true} }

// Build optimizes for w under the schema.
func (m MFKB) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	return BuildDense(ctx, m, w, schema, opt)
}

// BuildBlock optimizes for w0 under the schema restricted to a block.
func (m MFKB) BuildBlock(ctx context.Context, w0 dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (*Factorization, *mat.SymDense, error) {
	key := ProblemKey{Kind: "mf-kb", Stamps: 1, Schema: schema}
	if schema.Kind != dpcore.Single {
		k0 := (w0.N + schema.B - 1) / schema.B
		key.Schema = dpcore.Schema{Kind: schema.Kind, K: min(k0, schema.K), B: schema.B}
	}
	f, err := optimized(ctx, m.String(), "mf-kb", key, w0, KBFamily{}, opt, opt.Optimize.GapOrDefault())
	return f, nil, err
}

// StampDecoder: the optimal decoder.
func (MFKB) StampDecoder() StampDecoder { return StampOptimal }

func (MFKB) workMatrices() int { return kbMatrices }

// BandMF is banded matrix factorization with Bands bands (banded-MF;
// BandedFamily), or with Auto, the band count the planner picks (by
// amplified accounting under band sampling, banded-MF App. F.4, or by the
// loss under the schema without amplification; see AutoBanded for the
// count it is built with by itself).
type BandMF struct {
	Bands int
	Auto  bool
}

func (m BandMF) String() string { return bandsName("bandmf", m.Bands, m.Auto) }

// Structure: b-banded, or banded with the planner's count.
func (m BandMF) Structure() Structure { return bandsStructure(m.Bands, m.Auto) }

// WithBands is BandMF with b bands.
func (BandMF) WithBands(b int) Mechanism { return BandMF{Bands: b} }

// Build optimizes a banded encoder for w: a dense factorization up to
// dpcore.DenseStepLimit steps, above it the band alone (*BandedStrategy,
// cached as a banded entry), whose noise, sensitivity and loss need no
// n x n matrix.
func (m BandMF) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	if w.N <= dpcore.DenseStepLimit {
		return BuildDense(ctx, m, w, schema, opt)
	}
	return m.buildBanded(ctx, w, schema, opt)
}

// bands is the band count built for n0 steps under the schema.
func (m BandMF) bands(n0 int, schema dpcore.Schema) (int, error) {
	bands := m.Bands
	if m.Auto {
		bands = n0
		if schema.Kind != dpcore.Single {
			bands = min(schema.B, n0)
		}
	}
	if bands < 1 || bands > n0 {
		return 0, guard.Invalidf("build %s: %d bands, need 1..%d (steps per stamp)", m, bands, n0)
	}
	return bands, nil
}

// buildBanded is Build above dpcore.DenseStepLimit: the optimizer's band
// (Result.Banded) through the cache, bound to w.
func (m BandMF) buildBanded(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (*BandedStrategy, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if err := schema.Validate(w.N); err != nil {
		return nil, err
	}
	bands, err := m.bands(w.N, schema)
	if err != nil {
		return nil, err
	}
	// The key and problem are the dense build's (the schema only sets the
	// band count: the encoder has unit columns under any schema).
	key := ProblemKey{Kind: "bandmf", Stamps: 1, Bands: bands, Workload: w}
	if opt.Optimize != nil {
		key.Gap = opt.Optimize.Gap
	}
	label := fmt.Sprintf("bandmf:%d", bands)
	tr := buildTraceFrom(ctx)
	produce := func(ctx context.Context) (*BandedEncoder, error) {
		res, err := tr.optimize(label, w.N, 0, func(progress func(optimize.Progress)) (*Result, error) {
			return Optimize(ctx, Problem{Workload: w, Schema: key.Schema, Family: BandedFamily{Bands: bands}}, withProgress(opt.Optimize, progress))
		})
		if err != nil {
			return nil, err
		}
		if res == nil || res.Banded == nil {
			return nil, fmt.Errorf("mfnoise: build %s: optimizer returned no banded encoder", m)
		}
		return res.Banded, nil
	}
	e, hit, err := opt.Cache.getOrBuildBanded(ctx, key, produce)
	if hit {
		path, _, _ := opt.Cache.entry(key, bandedStoreExt)
		tr.cached(label, w.N, path)
	}
	if err != nil {
		return nil, fmt.Errorf("mfnoise: build %s: %w", m, err)
	}
	return e.For(w)
}

// BuildBlock optimizes a banded encoder for w0.
func (m BandMF) BuildBlock(ctx context.Context, w0 dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (*Factorization, *mat.SymDense, error) {
	bands, err := m.bands(w0.N, schema)
	if err != nil {
		return nil, nil, err
	}
	key := ProblemKey{Kind: "bandmf", Stamps: 1, Bands: bands}
	// The optimizer stops when the loss stalls (a target gap of 0 to the
	// trace), then proves its bound up to bandedBoundMaxN steps (the
	// trace's certificate).
	f, err := optimized(ctx, m.String(), fmt.Sprintf("bandmf:%d", bands), key, w0, BandedFamily{Bands: bands}, opt, 0)
	return f, nil, err
}

// StampDecoder: the optimal decoder.
func (BandMF) StampDecoder() StampDecoder { return StampOptimal }

func (BandMF) workMatrices() int { return bandedEncoderMatrices }

// bandsName is the name of a banded family: family:BANDS, or family:auto.
func bandsName(family string, bands int, auto bool) string {
	if auto {
		return family + ":auto"
	}
	return family + ":" + strconv.Itoa(bands)
}

// bandsStructure is a banded encoder's structure: b bands, or the
// planner's count.
func bandsStructure(bands int, auto bool) Structure {
	if auto {
		return Structure{AutoBands: true}
	}
	return Structure{Bands: bands}
}

// NoiseCost: the band count, read off the encoder (b = max_i (i - first
// nonzero column of row i) + 1 within a block).
func (BandMF) NoiseCost(s dpcore.Strategy, stamps int) (float64, string) {
	return bandedCost(s, stamps)
}

// optimized runs Optimize for family under key.Schema and workload w
// through opt.Cache (key with w) and under the context's BuildTrace
// (reported as label, stopping at the relative gap stop).
func optimized(ctx context.Context, name, label string, key ProblemKey, w dpcore.Workload, family Family, opt BuildOptions, stop float64) (*Factorization, error) {
	if opt.Optimize != nil {
		key.Gap = opt.Optimize.Gap
	}
	key.Workload = w
	tr := buildTraceFrom(ctx)
	produce := func(ctx context.Context) (*Factorization, error) {
		res, err := tr.optimize(label, w.N, stop, func(progress func(optimize.Progress)) (*Result, error) {
			return Optimize(ctx, Problem{Workload: w, Schema: key.Schema, Family: family}, withProgress(opt.Optimize, progress))
		})
		if err != nil {
			return nil, err
		}
		if res == nil || res.Factorization == nil {
			return nil, fmt.Errorf("mfnoise: build %s: optimizer returned no factorization", name)
		}
		return res.Factorization, nil
	}
	var f *Factorization
	var err error
	if opt.Cache != nil {
		var hit bool
		f, hit, err = opt.Cache.GetOrBuild(ctx, key, produce)
		if hit {
			path, _ := opt.Cache.Path(key)
			tr.cached(label, w.N, path)
		}
	} else {
		f, err = produce(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("mfnoise: build %s: %w", name, err)
	}
	return f, nil
}
