package mfnoise

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"
)

// CompareRow scores one mechanism for a workload and schema (SPEC 4): the
// loss sens^2 ||B||_F^2 for unit noise multiplier, and what streaming its
// noise costs.
type CompareRow struct {
	// Mechanism is the name as given.
	Mechanism string `json:"mechanism"`
	// Sensitivity is sens(C) under the schema for clipping norm 1, with
	// whether it is exact and how it was computed (SPEC 3).
	Sensitivity       float64           `json:"sensitivity"`
	SensitivityExact  bool              `json:"sensitivity_exact"`
	SensitivityMethod SensitivityMethod `json:"sensitivity_method"`
	// Loss is sens^2 ||B||_F^2, the total squared error for noise
	// multiplier 1; RMSE is sqrt(Loss / n).
	Loss float64 `json:"loss"`
	RMSE float64 `json:"rmse"`
	// NoiseMemoryPerCoord is how many float32 d-vectors the streaming noise
	// source keeps: 1 for DP-SGD, the band count for banded MF, about log2 n
	// for the online tree, n for dense lower-triangular encoders, m (rows of
	// one stamp's encoder) for tall encoders with the optimal decoder.
	NoiseMemoryPerCoord float64 `json:"noise_memory_per_coord"`
	// StepTime is the complexity class of producing one step's noise, e.g.
	// "O(d)", "O(b d)", "O(d log n)", "O(n d)".
	StepTime string `json:"step_time"`
	// BuildSeconds is the wall time of building (or loading) and scoring
	// the mechanism.
	BuildSeconds float64 `json:"build_seconds"`
	// StepRMSE is the per-step error standard deviation sens ||B[i,:]||.
	StepRMSE []float64 `json:"step_rmse,omitempty"`
}

// Compare builds every mechanism in specs for workload w and schema and
// returns their scores sorted by loss (lowest first). The Toeplitz
// mechanisms (dpsgd, sqrt, toeplitz:BANDS, blt:NBUF, bisr:BANDS) are scored
// from their coefficients in O(n) memory at any n up to MaxStructuredSteps,
// and so is tree-online for the prefix sum under single or (k,b)
// participation above DenseStepLimit; the others build dense matrices and
// are refused above DenseStepLimit steps with the memory they would need. A mechanism that fails
// to build or score fails the comparison with an error naming it.
func Compare(ctx context.Context, w Workload, schema Schema, specs []MechanismSpec, opt BuildOptions) ([]CompareRow, error) {
	if len(specs) == 0 {
		return nil, invalidf("compare: no mechanisms")
	}
	rows := make([]CompareRow, 0, len(specs))
	for _, spec := range specs {
		row, err := compareOne(ctx, spec, w, schema, opt)
		if err != nil {
			return nil, prefixf(err, "compare %s", spec.Name)
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Loss < rows[j].Loss })
	return rows, nil
}

func compareOne(ctx context.Context, spec MechanismSpec, w Workload, schema Schema, opt BuildOptions) (CompareRow, error) {
	if toeplitzKind(spec.Kind) && spec.Stamps <= 1 {
		return compareToeplitz(ctx, spec, w, schema, opt)
	}
	if spec.Kind == KindTreeOnline && spec.Stamps <= 1 && w.N > DenseStepLimit && w.Kind == PrefixSumKind {
		return compareTreeOnline(ctx, spec, w, schema)
	}
	start := time.Now()
	f, x, err := build(ctx, spec, w, schema, opt)
	if err != nil {
		return CompareRow{}, err
	}
	row, err := score(spec, f, x, schema)
	row.BuildSeconds = time.Since(start).Seconds()
	return row, err
}

// Score scores a caller's own factorization under schema as Compare scores
// the built-in mechanisms, so the two can be ranked together; its noise
// cost is that of a dense encoder unless Meta.Bands declares it banded.
func Score(name string, f *Factorization, schema Schema) (CompareRow, error) {
	if f == nil || f.Encoder == nil || f.Decoder == nil {
		return CompareRow{}, invalidf("score %s: nil factorization", name)
	}
	spec := MechanismSpec{Name: name, Stamps: 1}
	if f.Meta.Bands > 0 {
		spec.Kind, spec.Bands = KindBandMF, f.Meta.Bands
	}
	row, err := score(spec, f, nil, schema)
	if err != nil {
		return CompareRow{}, fmt.Errorf("mfnoise: score %s: %w", name, err)
	}
	return row, nil
}

func score(spec MechanismSpec, f *Factorization, x *mat.SymDense, schema Schema) (CompareRow, error) {
	sens, err := scoreSensitivity(f, x, schema)
	if err != nil {
		return CompareRow{}, err
	}
	n, _ := f.Decoder.Dims()
	row := CompareRow{
		Mechanism:         spec.Name,
		Sensitivity:       sens.Value,
		SensitivityExact:  sens.Exact,
		SensitivityMethod: sens.Method,
		StepRMSE:          make([]float64, n),
	}
	for i := 0; i < n; i++ {
		r := f.Decoder.RawRowView(i)
		row.StepRMSE[i] = sens.Value * math.Sqrt(dot(r, r))
	}
	row.Loss = f.LossAt(sens.Value)
	row.RMSE = math.Sqrt(row.Loss / float64(n))
	if !finiteFloat(row.Loss) {
		return CompareRow{}, fmt.Errorf("mfnoise: loss is %v", row.Loss)
	}
	row.NoiseMemoryPerCoord, row.StepTime = noiseCost(spec, f)
	return row, nil
}

// scoreSensitivity is f.Sensitivity(schema), from the structured Gram
// matrix when the mechanism supplied one.
func scoreSensitivity(f *Factorization, x *mat.SymDense, schema Schema) (SensitivityResult, error) {
	if x == nil {
		return f.Sensitivity(schema)
	}
	if err := schema.Validate(f.N()); err != nil {
		return SensitivityResult{}, err
	}
	return sensitivityFromGram(f.Encoder, x, schema)
}

// noiseCost is the streaming cost of a mechanism's gradient-space noise
// (SPEC 6), per coordinate of the model.
func noiseCost(spec MechanismSpec, f *Factorization) (float64, string) {
	s := max(spec.Stamps, 1)
	m, _ := f.Encoder.Dims()
	n0, m0 := f.N()/s, m/s
	switch spec.Kind {
	case KindDPSGD:
		return 1, "O(d)"
	case KindTreeOnline:
		// One partial sum per tree level, plus the completed blocks' total
		// when stamped.
		levels := 0
		for 1<<levels < n0 {
			levels++
		}
		mem := float64(levels + 1)
		if s > 1 {
			mem++
		}
		return mem, "O(d log n)"
	case KindTreeFull:
		return float64(m0), "O(n d)"
	case KindFFT:
		return float64(m0), "O(d log n)"
	case KindFFTOpt:
		return float64(m0), "O(d log^2 n)"
	case KindBandMF:
		// The band count is read off the encoder: b = max_i (i - first
		// nonzero column of row i) + 1.
		lo, hi, _ := rowSpans(f.Encoder)
		bands := 1
		for i := range lo {
			if hi[i] > lo[i] {
				bands = max(bands, i%max(n0, 1)-lo[i]%max(n0, 1)+1)
			}
		}
		return float64(bands), "O(b d)"
	}
	return float64(n0), "O(n d)"
}

// prefixedError adds context to an error of this package keeping a single
// "mfnoise: " prefix: "mfnoise: compare x: invalid argument: ...", not
// "mfnoise: compare x: mfnoise: invalid argument: ...". errors.Is and As
// see the wrapped error.
type prefixedError struct {
	msg string
	err error
}

func (e *prefixedError) Error() string { return e.msg }
func (e *prefixedError) Unwrap() error { return e.err }

func prefixf(err error, format string, args ...any) error {
	return &prefixedError{msg: "mfnoise: " + fmt.Sprintf(format, args...) + ": " + strings.TrimPrefix(err.Error(), "mfnoise: "), err: err}
}
