package mfnoise

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/mfnoise/optimize"

	"gonum.org/v1/gonum/mat"
)

// BuildOptions configures Build and Compare.
type BuildOptions struct {
	// Cache stores optimized factorizations so an expensive optimization
	// runs once; nil means no caching. Closed forms are never cached: they
	// build in well under a second at n = 2000.
	Cache *Cache
	// Optimize tunes the optimizers (mf-single, mf-kb, bandmf); nil means
	// their defaults.
	Optimize *optimize.Settings
}

// Build makes the factorization named by spec for workload w under the
// participation schema (which only the optimizers mf-kb and bandmf:auto
// read; the encoder of every other kind does not depend on it, though the
// schema is still validated against n).
//
// Kinds: dpsgd (DPSGD), tree-online (BinaryTree with TreeOnline, Completion
// and ZeroVirtual), tree-full (TreeFull), fft (FFTAlgorithm1), fft-opt
// (FFTOptimal), mf-single (OptimizeSingle), mf-kb (OptimizeKB), bandmf
// (OptimizeBanded). bandmf:auto uses min(b, n/s) bands under (k,b) and
// min-sep schemas (the most bands for which column-normalized banded C keeps
// sens = sqrt(k), banded-MF Thm 2) and n/s bands under single participation;
// the amplification-aware choice (SPEC 7) belongs to the privacy planner.
//
// With S > 1 stamps the mechanism is built for n/S steps and stamped: the
// online tree and the Algorithm-1 FFT with the restarted decoder (their
// cheap streaming structure survives), everything else with the optimal
// decoder. A stamped mf-kb is optimized for (ceil((n/S)/b), b) within its
// block.
func Build(ctx context.Context, spec MechanismSpec, w Workload, schema Schema, opt BuildOptions) (*Factorization, error) {
	f, _, err := build(ctx, spec, w, schema, opt)
	return f, err
}

func build(ctx context.Context, spec MechanismSpec, w Workload, schema Schema, opt BuildOptions) (*Factorization, *mat.SymDense, error) {
	if err := checkDense("build "+spec.Name, w.N, denseMatrices); err != nil {
		return nil, nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, nil, err
	}
	if err := schema.Validate(w.N); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: build %s: %w", spec.Name, err)
	}
	s := spec.Stamps
	if s == 0 {
		s = 1
	}
	if s < 0 || w.N%s != 0 {
		return nil, nil, invalidf("build %s: %d stamps do not divide n = %d steps", spec.Name, s, w.N)
	}
	n0 := w.N / s
	inner, decoder, err := innerBuilder(ctx, spec, schema, n0, s, opt)
	if err != nil {
		return nil, nil, err
	}
	if s == 1 {
		return inner(w)
	}
	return stamp(w, s, inner, decoder)
}

// innerBuilder returns the builder of the (block) mechanism and the stamping
// decoder that suits it.
func innerBuilder(ctx context.Context, spec MechanismSpec, schema Schema, n0, s int, opt BuildOptions) (builder, StampDecoder, error) {
	tree := func(o TreeOptions) builder {
		return func(w Workload) (*Factorization, *mat.SymDense, error) { return binaryTree(w, o) }
	}
	fft := func(d FFTDecoder) builder {
		return func(w Workload) (*Factorization, *mat.SymDense, error) { return fftMechanism(w, d) }
	}
	switch spec.Kind {
	case KindDPSGD:
		return dpsgd, StampOptimal, nil
	case KindTreeOnline:
		return tree(TreeOptions{Decoder: TreeOnline, Completion: true, ZeroVirtual: true}), StampRestartedOnline, nil
	case KindTreeFull:
		return tree(TreeOptions{Decoder: TreeFull}), StampOptimal, nil
	case KindFFT:
		return fft(FFTAlgorithm1), StampRestartedOnline, nil
	case KindFFTOpt:
		return fft(FFTOptimal), StampOptimal, nil
	case KindSqrt, KindToeplitz, KindBLT, KindBISR:
		// The dense factorization of the Toeplitz mechanism, for the plan
		// code that works on dense encoders (small n).
		return func(w Workload) (*Factorization, *mat.SymDense, error) {
			t, err := BuildToeplitz(ctx, spec, w, schema, opt)
			if err != nil {
				return nil, nil, err
			}
			f, err := t.Factorization(w)
			return f, nil, err
		}, StampOptimal, nil
	case KindMFSingle, KindMFKB, KindBandMF:
	default:
		return nil, 0, invalidf("build: unknown mechanism kind %q", spec.Kind)
	}
	key := ProblemKey{Kind: spec.Kind, Stamps: 1}
	if opt.Optimize != nil {
		key.Gap = opt.Optimize.Gap
	}
	label := spec.Kind // the name progress and cache reports use
	var run func(ctx context.Context, w Workload, o *optimize.Settings) (*OptimizeResult, error)
	switch spec.Kind {
	case KindMFSingle:
		run = func(ctx context.Context, w Workload, o *optimize.Settings) (*OptimizeResult, error) {
			return OptimizeSingle(ctx, w, o)
		}
	case KindMFKB:
		if schema.Kind == Single {
			key.Schema = schema
		} else {
			k0 := (n0 + schema.B - 1) / schema.B
			key.Schema = Schema{Kind: schema.Kind, K: min(k0, schema.K), B: schema.B}
		}
		run = func(ctx context.Context, w Workload, o *optimize.Settings) (*OptimizeResult, error) {
			return OptimizeKB(ctx, w, key.Schema, o)
		}
	case KindBandMF:
		bands := spec.Bands
		if spec.AutoBands {
			bands = n0
			if schema.Kind != Single {
				bands = min(schema.B, n0)
			}
		}
		if bands < 1 || bands > n0 {
			return nil, 0, invalidf("build %s: %d bands, need 1..%d (steps per stamp)", spec.Name, bands, n0)
		}
		key.Bands = bands
		label = fmt.Sprintf("%s:%d", KindBandMF, bands)
		run = func(ctx context.Context, w Workload, o *optimize.Settings) (*OptimizeResult, error) {
			return OptimizeBanded(ctx, w, bands, o)
		}
	}
	b := func(w Workload) (*Factorization, *mat.SymDense, error) {
		k := key
		k.Workload = w
		tr := buildTraceFrom(ctx)
		produce := func(ctx context.Context) (*Factorization, error) {
			var res *OptimizeResult
			err := tr.optimize(label, w.N, stopGap(spec.Kind, opt.Optimize), func(progress func(optimize.Progress)) error {
				var err error
				res, err = run(ctx, w, withProgress(opt.Optimize, progress))
				return err
			})
			if err != nil {
				return nil, err
			}
			if res == nil || res.Factorization == nil {
				return nil, fmt.Errorf("mfnoise: build %s: optimizer returned no factorization", spec.Name)
			}
			return res.Factorization, nil
		}
		var f *Factorization
		var err error
		if opt.Cache != nil {
			var hit bool
			f, hit, err = opt.Cache.GetOrBuild(ctx, k, produce)
			if hit {
				path, _ := opt.Cache.Path(k)
				tr.cached(label, w.N, path)
			}
		} else {
			f, err = produce(ctx)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("mfnoise: build %s: %w", spec.Name, err)
		}
		return f, nil, nil
	}
	return b, StampOptimal, nil
}
