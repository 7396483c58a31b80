package mfnoise

import (
	"context"
	"fmt"
	"math"
	"time"
)

// DenseStepLimit is the largest n for which mechanisms without Toeplitz
// structure (trees, FFT, optimal and banded MF) are built: they hold
// several dense n x n float64 matrices (A, C, B, C^T C), 2.5 GiB at this
// limit. Larger n is refused with the memory it would need; the Toeplitz
// mechanisms (dpsgd, sqrt, toeplitz:BANDS, blt:NBUF, bisr:BANDS) and
// tree-online for the prefix sum under single or (k,b) participation are
// scored from their structure up to MaxStructuredSteps.
const DenseStepLimit = 8192

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
// toeplitz:BANDS, blt:NBUF) for workload w under the schema in O(n) memory:
// dpsgd and sqrt in closed form, toeplitz:BANDS by OptimizeToeplitz and
// blt:NBUF by OptimizeBLT (total loss over w.N steps under the schema).
func BuildToeplitz(ctx context.Context, spec MechanismSpec, w Workload, schema Schema) (*Toeplitz, error) {
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
		if spec.Bands < 1 || spec.Bands > w.N {
			return nil, invalidf("build %s: %d bands, need 1..n = %d", spec.Name, spec.Bands, w.N)
		}
		res, err := OptimizeToeplitz(ctx, ow, schema, spec.Bands, nil)
		if err != nil {
			return nil, fmt.Errorf("mfnoise: build %s: %w", spec.Name, err)
		}
		return res.Mechanism, nil
	case KindBISR:
		return BandedInverseSqrt(w.N, spec.Bands)
	case KindBLT:
		res, err := OptimizeBLT(ctx, ow, schema, spec.Buffers, nil)
		if err != nil {
			return nil, fmt.Errorf("mfnoise: build %s: %w", spec.Name, err)
		}
		return res.Mechanism, nil
	}
	return nil, invalidf("build %s: unknown kind %q", spec.Name, spec.Kind)
}

// compareToeplitz scores a Toeplitz mechanism without any n x n matrix.
func compareToeplitz(ctx context.Context, spec MechanismSpec, w Workload, schema Schema) (CompareRow, error) {
	start := time.Now()
	t, err := BuildToeplitz(ctx, spec, w, schema)
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
	build := time.Since(start)
	row := CompareRow{
		Mechanism:         spec.Name,
		Sensitivity:       sens.Value,
		SensitivityExact:  sens.Exact,
		SensitivityMethod: sens.Method,
		StepRMSE:          make([]float64, len(r)),
		BuildSeconds:      build.Seconds(),
	}
	fro := 0.0
	for i, v := range r {
		fro += v
		row.StepRMSE[i] = sens.Value * math.Sqrt(v)
	}
	row.Loss = sens.Value * sens.Value * fro
	row.RMSE = math.Sqrt(row.Loss / float64(w.N))
	if !finiteFloat(row.Loss) {
		return CompareRow{}, fmt.Errorf("mfnoise: loss is %v", row.Loss)
	}
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
