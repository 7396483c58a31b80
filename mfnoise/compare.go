package mfnoise

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
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

// Compare builds every mechanism for workload w and schema and returns
// their scores sorted by loss (lowest first), each row named by the
// mechanism's String. Each is scored from the strategy it builds: the
// Toeplitz families (DPSGD, Sqrt, BandedToeplitz, BLT, BISR) from their
// coefficients in O(n) memory at any n up to dpcore.StructuredStepLimit, and
// tree-online for the prefix sum under single or (k,b) participation above
// dpcore.DenseStepLimit from its tree. A mechanism that is not a Coster, a
// caller's own factorization for one, is costed as a dense encoder and
// refused above dpcore.DenseStepLimit steps with the memory it would need before
// it is built. A mechanism that fails to build
// or score fails the comparison with an error naming it.
//
// Optimizers report their progress, and the cache its hits, to the
// BuildTrace the context carries (WithBuildTrace).
func Compare(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, mechs []Mechanism, opt BuildOptions) ([]CompareRow, error) {
	if len(mechs) == 0 {
		return nil, guard.Invalidf("compare: no mechanisms")
	}
	rows := make([]CompareRow, 0, len(mechs))
	for i, m := range mechs {
		if m == nil {
			return nil, guard.Invalidf("compare: mechanism %d is nil", i+1)
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

func compareOne(ctx context.Context, m Mechanism, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (CompareRow, error) {
	coster, structured := m.(Coster)
	if !structured {
		// Costed as dense: refused above dpcore.DenseStepLimit before it builds.
		if err := guard.Dense("score "+m.String(), w.N, peakMatrices(m)); err != nil {
			return CompareRow{}, err
		}
	}
	start := time.Now()
	st, err := m.Build(ctx, w, schema, opt)
	if err != nil {
		return CompareRow{}, err
	}
	if st == nil {
		return CompareRow{}, guard.Invalidf("%s built no strategy", m)
	}
	if st.Steps() != w.N {
		return CompareRow{}, guard.Invalidf("%s factorizes %d steps, not n = %d", m, st.Steps(), w.N)
	}
	row, err := scoreStrategy(m.String(), st, schema)
	if err != nil {
		return CompareRow{}, err
	}
	if structured {
		row.NoiseMemoryPerCoord, row.StepTime = coster.NoiseCost(st, 1)
	} else {
		row.NoiseMemoryPerCoord, row.StepTime = denseCost(st, 1)
	}
	row.BuildSeconds = time.Since(start).Seconds()
	return row, nil
}

// scoreStrategy is the loss profile of strategy s under the schema (the
// sensitivity from the closed-form Gram matrix a dense family carries).
func scoreStrategy(name string, s dpcore.Strategy, schema dpcore.Schema) (CompareRow, error) {
	var sens dpcore.SensitivityResult
	var err error
	if f, ok := s.(*Factorization); ok && f.gram != nil {
		if err := schema.Validate(f.N()); err != nil {
			return CompareRow{}, err
		}
		sens, err = sensitivity.FromGram(f.Encoder, f.gram, schema)
	} else {
		sens, err = s.Sensitivity(schema)
	}
	if err != nil {
		return CompareRow{}, err
	}
	r, err := s.DecoderRowNorms()
	if err != nil {
		return CompareRow{}, err
	}
	return rowFromNorms(name, sens, r)
}

// Score scores a caller's own factorization under schema as Compare scores
// the built-in mechanisms, so the two can be ranked together; its noise
// cost is that of a dense encoder unless Meta.Bands declares it banded.
func Score(name string, f *Factorization, schema dpcore.Schema) (CompareRow, error) {
	if f == nil || f.Encoder == nil || f.Decoder == nil {
		return CompareRow{}, guard.Invalidf("score %s: nil factorization", name)
	}
	row, err := scoreStrategy(name, f, schema)
	if err != nil {
		return CompareRow{}, prefixf(err, "score %s", name)
	}
	row.NoiseMemoryPerCoord, row.StepTime = denseCost(f, 1)
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
	if !guard.Finite(row.Loss) {
		return CompareRow{}, fmt.Errorf("mfnoise: loss is %v", row.Loss)
	}
	return row, nil
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
