package mfnoise

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
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
	Sensitivity       float64                  `json:"sensitivity"`
	SensitivityExact  bool                     `json:"sensitivity_exact"`
	SensitivityMethod dpcore.SensitivityMethod `json:"sensitivity_method"`
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

// Mechanism is what Compare scores: a named way to factorize a workload.
// The planner's typed mechanisms (package privacy) satisfy it, and so does
// a MechanismSpec; so can a caller's own factorization (privacy's
// Factorization wraps one).
type Mechanism interface {
	// String is the name Compare reports, e.g. "bandmf:8/s2".
	String() string
	// Factorize builds the factorization for workload w; schema is the
	// participation it will be run under (optimizers may read it).
	Factorize(ctx context.Context, w Workload, schema Schema, opt BuildOptions) (*Factorization, error)
}

// Builtin is a Mechanism of one of this package's kinds. Compare reads its
// kind to score it from its structure: the Toeplitz mechanisms (dpsgd,
// sqrt, toeplitz:BANDS, blt:NBUF, bisr:BANDS) from their coefficients and
// tree-online for the prefix sum from its tree, without any n x n matrix.
type Builtin interface {
	Mechanism
	// BuiltinSpec is the mechanism's kind and parameters.
	BuiltinSpec() (MechanismSpec, error)
}

// Factorize is Build(ctx, s, w, schema, opt): a MechanismSpec is a
// Mechanism.
func (s MechanismSpec) Factorize(ctx context.Context, w Workload, schema Schema, opt BuildOptions) (*Factorization, error) {
	return Build(ctx, s, w, schema, opt)
}

// BuiltinSpec is s: a MechanismSpec is a Builtin.
func (s MechanismSpec) BuiltinSpec() (MechanismSpec, error) { return s, nil }

// Compare builds every mechanism for workload w and schema and returns
// their scores sorted by loss (lowest first), each row named by the
// mechanism's String. Builtin mechanisms are scored from their structure
// where they have one: the Toeplitz mechanisms (dpsgd, sqrt,
// toeplitz:BANDS, blt:NBUF, bisr:BANDS) from their coefficients in O(n)
// memory at any n up to MaxStructuredSteps, and tree-online for the prefix
// sum under single or (k,b) participation above DenseStepLimit. Every other
// mechanism, a caller's own factorization included, is scored from its
// dense factorization, and refused above DenseStepLimit steps with the
// memory it would need before it is built. A mechanism that fails to build
// or score fails the comparison with an error naming it.
//
// Optimizers report their progress, and the cache its hits, to the
// BuildTrace the context carries (WithBuildTrace).
func Compare(ctx context.Context, w Workload, schema Schema, mechs []Mechanism, opt BuildOptions) ([]CompareRow, error) {
	if len(mechs) == 0 {
		return nil, invalidf("compare: no mechanisms")
	}
	rows := make([]CompareRow, 0, len(mechs))
	for i, m := range mechs {
		if m == nil {
			return nil, invalidf("compare: mechanism %d is nil", i+1)
		}
		row, err := compareOne(ctx, m, w, schema, opt)
		if err != nil {
			return nil, prefixf(err, "compare %s", m)
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Loss < rows[j].Loss })
	return rows, nil
}

func compareOne(ctx context.Context, m Mechanism, w Workload, schema Schema, opt BuildOptions) (CompareRow, error) {
	b, ok := m.(Builtin)
	if !ok {
		return compareFactorization(ctx, m, w, schema, opt)
	}
	spec, err := b.BuiltinSpec()
	if err != nil {
		return CompareRow{}, err
	}
	spec.Name = m.String()
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

// compareFactorization scores a mechanism that is not Builtin from the
// factorization it builds, refusing n above DenseStepLimit before building.
func compareFactorization(ctx context.Context, m Mechanism, w Workload, schema Schema, opt BuildOptions) (CompareRow, error) {
	if err := checkDense("score "+m.String(), w.N, denseMatrices); err != nil {
		return CompareRow{}, err
	}
	start := time.Now()
	f, err := m.Factorize(ctx, w, schema, opt)
	if err != nil {
		return CompareRow{}, err
	}
	if f == nil || f.Encoder == nil || f.Decoder == nil {
		return CompareRow{}, invalidf("%s built no factorization", m)
	}
	if f.N() != w.N {
		return CompareRow{}, invalidf("%s factorizes %d steps, not n = %d", m, f.N(), w.N)
	}
	row, err := score(customSpec(m.String(), f), f, nil, schema)
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
	row, err := score(customSpec(name, f), f, nil, schema)
	if err != nil {
		return CompareRow{}, prefixf(err, "score %s", name)
	}
	return row, nil
}

// customSpec is how a caller's factorization is costed: a banded encoder
// when Meta.Bands declares one, a dense one otherwise.
func customSpec(name string, f *Factorization) MechanismSpec {
	spec := MechanismSpec{Name: name, Stamps: 1}
	if f.Meta.Bands > 0 {
		spec.Kind, spec.Bands = KindBandMF, f.Meta.Bands
	}
	return spec
}

func score(spec MechanismSpec, f *Factorization, x *mat.SymDense, schema Schema) (CompareRow, error) {
	sens, err := scoreSensitivity(f, x, schema)
	if err != nil {
		return CompareRow{}, err
	}
	n, _ := f.Decoder.Dims()
	r := make([]float64, n)
	for i := range r {
		b := f.Decoder.RawRowView(i)
		r[i] = dot(b, b)
	}
	row, err := rowFromNorms(spec.Name, sens, r)
	if err != nil {
		return CompareRow{}, err
	}
	row.NoiseMemoryPerCoord, row.StepTime = noiseCost(spec, f)
	return row, nil
}

// rowFromNorms is the score of a mechanism with sensitivity sens whose
// decoder rows have squared norms r = ||B[i,:]||^2: StepRMSE sens
// ||B[i,:]||, Loss sens^2 ||B||_F^2 (SPEC 4) and RMSE sqrt(Loss/n).
func rowFromNorms(name string, sens dpcore.SensitivityResult, r []float64) (CompareRow, error) {
	row := CompareRow{
		Mechanism:         name,
		Sensitivity:       sens.Value,
		SensitivityExact:  sens.Exact,
		SensitivityMethod: sens.Method,
	}
	row.Loss, row.StepRMSE = errorProfile(sens.Value, r)
	for i, v := range row.StepRMSE {
		row.StepRMSE[i] = math.Sqrt(v)
	}
	row.RMSE = math.Sqrt(row.Loss / float64(len(r)))
	if !finiteFloat(row.Loss) {
		return CompareRow{}, fmt.Errorf("mfnoise: loss is %v", row.Loss)
	}
	return row, nil
}

// scoreSensitivity is f.Sensitivity(schema), from the structured Gram
// matrix when the mechanism supplied one.
func scoreSensitivity(f *Factorization, x *mat.SymDense, schema Schema) (dpcore.SensitivityResult, error) {
	if x == nil {
		return f.Sensitivity(schema)
	}
	if err := schema.Validate(f.N()); err != nil {
		return dpcore.SensitivityResult{}, err
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

// prefixedError adds context to an error keeping a single "mfnoise: "
// prefix: "mfnoise: compare x: ...", not "mfnoise: compare x: mfnoise:
// ...", by reading the reason of this package's structured errors
// (dpcore.Within). errors.Is and As see the wrapped error.
type prefixedError struct {
	context string
	err     error
}

func (e *prefixedError) Error() string   { return "mfnoise: " + e.Reason() }
func (e *prefixedError) Reason() string  { return e.context + ": " + dpcore.Within("mfnoise", e.err) }
func (e *prefixedError) Package() string { return "mfnoise" }
func (e *prefixedError) Unwrap() error   { return e.err }

func prefixf(err error, format string, args ...any) error {
	return &prefixedError{context: fmt.Sprintf(format, args...), err: err}
}
