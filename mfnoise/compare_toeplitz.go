package mfnoise

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dpmf-go/dpmf/mfnoise/optimize"

	"github.com/dpmf-go/dpmf/dpcore"
)

// DenseStepLimit is the largest n for which mechanisms without Toeplitz
// structure (trees, FFT, optimal and banded MF) are built: they hold
// several dense n x n float64 matrices (A, C, B, C^T C), 2.5 GiB at this
// limit. Larger n is refused with the memory it would need; the Toeplitz
// mechanisms (dpsgd, sqrt, toeplitz:BANDS, blt:NBUF, bisr:BANDS) and
// tree-online for the prefix sum under single or (k,b) participation are
// scored from their structure up to MaxStructuredSteps.
const DenseStepLimit = dpcore.DenseStepLimit

// denseMatrices is how many n x n float64 matrices a dense build holds at
// its peak (workload, encoder, decoder, Gram matrix, product check).
const denseMatrices = 5

// checkDense refuses a dense build of n steps above DenseStepLimit.
func checkDense(name string, n, matrices int) error {
	if n > DenseStepLimit {
		return invalidf("%s: n = %d steps needs dense n x n matrices, about %s (%d x 8 n^2 bytes); the limit is n = %d (the Toeplitz mechanisms dpsgd, sqrt, toeplitz:BANDS, blt:NBUF and bisr:BANDS have none)",
			name, n, humanBytes(float64(matrices)*8*float64(n)*float64(n)), matrices, DenseStepLimit)
	}
	return nil
}

// BuildToeplitz makes the Toeplitz mechanism named by spec (dpsgd, sqrt,
// toeplitz:BANDS, blt:NBUF, bisr:BANDS) for workload w under the schema in
// O(n) memory: dpsgd, sqrt and bisr in closed form, toeplitz:BANDS by
// OptimizeToeplitz and blt:NBUF by OptimizeBLT (total loss over w.N steps
// under the schema; for a momentum workload with a time-varying schedule,
// of the same momentum at a constant rate, since the optimizers need a
// Toeplitz workload). The optimized kinds are kept in opt.Cache (their
// coefficients only); the closed forms are not cached.
func BuildToeplitz(ctx context.Context, spec MechanismSpec, w Workload, schema Schema, opt BuildOptions) (*Toeplitz, error) {
	if !toeplitzKind(spec.Kind) {
		return nil, invalidf("build %s: not a Toeplitz mechanism", spec.Name)
	}
	if spec.Stamps > 1 {
		return nil, invalidf("build %s: Toeplitz mechanisms are not stamped", spec.Name)
	}
	if err := checkSteps(w.N); err != nil {
		return nil, err
	}
	eta, err := workloadRates(w)
	if err != nil {
		return nil, err
	}
	// The optimizers need a Toeplitz workload: under a time-varying
	// schedule (cooldown) they optimize for the same momentum at a constant
	// rate; the mechanism still serves, and is scored on, w itself.
	ow := w
	if eta != nil && !constantRates(eta) {
		ow = Workload{Kind: MomentumKind, N: w.N, Momentum: w.Momentum, Schedule: ConstantSchedule(1)}
	}
	if err := schema.Validate(w.N); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mfnoise: build %s: %w", spec.Name, err)
	}
	switch spec.Kind {
	case KindDPSGD:
		return NewToeplitz(KindDPSGD, w.N, []float64{1})
	case KindSqrt:
		return SqrtToeplitz(w.N)
	case KindToeplitz:
		bands := spec.Bands
		if spec.AutoBands {
			// As bandmf:auto: the most bands the schema's sensitivity
			// allows without overlap (the planner chooses by amplified
			// accounting instead).
			bands = w.N
			if schema.Kind != Single {
				bands = min(schema.B, w.N)
			}
		}
		if bands < 1 || bands > w.N {
			return nil, invalidf("build %s: %d bands, need 1..n = %d", spec.Name, bands, w.N)
		}
		return optimizedToeplitz(ctx, spec, bands, OptimizeToeplitz, ow, w.N, schema, opt)
	case KindBISR:
		return BandedInverseSqrt(w.N, spec.Bands)
	case KindBLT:
		return optimizedToeplitz(ctx, spec, spec.Buffers, OptimizeBLT, ow, w.N, schema, opt)
	}
	return nil, invalidf("build %s: unknown kind %q", spec.Name, spec.Kind)
}

// optimizedToeplitz runs run (OptimizeToeplitz with size bands,
// OptimizeBLT with size buffers) for workload ow under the schema, through
// opt.Cache and under the context's BuildTrace, and checks that the result
// serves n steps.
func optimizedToeplitz(ctx context.Context, spec MechanismSpec, size int,
	run func(context.Context, Workload, Schema, int, ToeplitzProblem, *optimize.Settings) (*ToeplitzResult, error),
	ow Workload, n int, schema Schema, opt BuildOptions) (*Toeplitz, error) {
	key := ProblemKey{Kind: spec.Kind, Workload: ow, Schema: schema, Bands: size, Stamps: 1}
	tr := buildTraceFrom(ctx)
	label := spec.Kind + ":" + strconv.Itoa(size) // e.g. toeplitz:8, blt:4
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
		return nil, prefixf(err, "build %s", spec.Name)
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

// compareToeplitz scores a Toeplitz mechanism without any n x n matrix.
func compareToeplitz(ctx context.Context, spec MechanismSpec, w Workload, schema Schema, opt BuildOptions) (CompareRow, error) {
	start := time.Now()
	t, err := BuildToeplitz(ctx, spec, w, schema, opt)
	if err != nil {
		return CompareRow{}, err
	}
	sens, err := t.Sensitivity(schema)
	if err != nil {
		return CompareRow{}, err
	}
	r, err := t.DecoderRowNorms(w)
	if err != nil {
		return CompareRow{}, err
	}
	row, err := rowFromNorms(spec.Name, sens, r)
	if err != nil {
		return CompareRow{}, err
	}
	row.BuildSeconds = time.Since(start).Seconds()
	row.NoiseMemoryPerCoord = float64(t.NoiseMemoryPerCoord())
	switch {
	case spec.Kind == KindDPSGD:
		row.StepTime = "O(d)"
	case t.BLT != nil:
		row.StepTime = "O(nbuf d)"
	case t.InvCoef != nil:
		row.StepTime = "O(b d)"
	default:
		row.StepTime = "O(b d)"
	}
	return row, nil
}
