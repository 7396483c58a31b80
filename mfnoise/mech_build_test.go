package mfnoise

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// The structured Gram matrices each mechanism hands to Compare must give
// exactly the sensitivity of the dense path, for every schema kind.
func TestStructuredSensitivityMatchesDense(t *testing.T) {
	w, _ := dpcore.PrefixSum(12)
	kb, _ := dpcore.KBParticipation(3, 4)
	ms, _ := dpcore.MinSepParticipation(3, 4)
	schemas := []dpcore.Schema{dpcore.SingleParticipation(), kb, ms}
	for _, spec := range named(t, "dpsgd,tree-online,tree-full,fft,fft-opt,tree-full/s3,fft/s2,tree-online/s4") {
		name := spec.String()
		if d, ok := spec.(DPSGD); ok {
			// Its strategy is the O(n) Toeplitz one: the Gram matrix comes
			// with the dense block.
			spec = Stamped{Inner: d, Stamps: 1}
		}
		for _, schema := range schemas {
			st, err := spec.Build(context.Background(), w, schema, BuildOptions{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			f := st.(*Factorization)
			if f.gram == nil {
				t.Fatalf("%s: no structured Gram matrix", name)
			}
			fast, err := scoreStrategy(name, f, schema)
			if err != nil {
				t.Fatal(err)
			}
			dense, err := sensitivity.Of(mat.DenseCopyOf(f.Encoder), schema)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(fast.Sensitivity-dense.Value) > 1e-12*dense.Value || fast.SensitivityMethod != dense.Method || fast.SensitivityExact != dense.Exact {
				t.Fatalf("%s under %v: structured %+v, dense %+v", name, schema, fast, dense)
			}
		}
	}
}

func TestCompareRanksAndScores(t *testing.T) {
	w, _ := dpcore.PrefixSum(16)
	schema, _ := dpcore.KBParticipation(4, 4)
	specs := named(t, "dpsgd,tree-online,tree-full,fft,fft-opt,tree-full/s2")
	rows, err := Compare(context.Background(), w, schema, specs, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(specs) {
		t.Fatalf("%d rows for %d mechanisms", len(rows), len(specs))
	}
	seen := map[string]bool{}
	for i, r := range rows {
		seen[r.Mechanism] = true
		if i > 0 && rows[i-1].Loss > r.Loss {
			t.Fatalf("rows not sorted by loss: %v then %v", rows[i-1].Loss, r.Loss)
		}
		sum := 0.0
		for _, v := range r.StepRMSE {
			sum += v * v
		}
		if len(r.StepRMSE) != 16 || math.Abs(sum-r.Loss) > 1e-9*r.Loss || math.Abs(r.RMSE-math.Sqrt(r.Loss/16)) > 1e-12*r.RMSE {
			t.Fatalf("%s: step RMSE / RMSE inconsistent with loss %v", r.Mechanism, r.Loss)
		}
		// The loss is sens^2 ||B||_F^2 of the dense factorization.
		f, err := BuildDense(context.Background(), named(t, r.Mechanism)[0], w, schema, BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := f.Loss(schema)
		if math.Abs(want-r.Loss) > 1e-9*want {
			t.Fatalf("%s: compare loss %v, factorization loss %v", r.Mechanism, r.Loss, want)
		}
	}
	for _, sp := range specs {
		if !seen[sp.String()] {
			t.Fatalf("no row for %s", sp)
		}
	}
	byName := map[string]CompareRow{}
	for _, r := range rows {
		byName[r.Mechanism] = r
	}
	if r := byName["dpsgd"]; r.NoiseMemoryPerCoord != 1 || r.StepTime != "O(d)" || math.Abs(r.Sensitivity-2) > 1e-12 || !r.SensitivityExact {
		t.Fatalf("dpsgd row %+v", r)
	}
	if r := byName["tree-online"]; r.NoiseMemoryPerCoord != 5 || r.StepTime != "O(d log n)" {
		t.Fatalf("tree-online row %+v", r)
	}
	// At n = 64, (4,16) the FFT Gram matrix is nonnegative on every pattern
	// block (its negative entries fall between patterns), so the
	// sensitivity is exact rather than the Thm 2.1 bound.
	if r := byName["fft"]; r.SensitivityMethod != sensitivity.NonnegativeGram || !r.SensitivityExact {
		t.Fatalf("fft row %+v", r)
	}
	// The optimal decoder never loses to another decoder of the same encoder.
	if byName["tree-full"].Loss > byName["tree-online"].Loss || byName["fft-opt"].Loss > byName["fft"].Loss {
		t.Fatal("optimal decoder worse than the online one")
	}
	js, err := json.Marshal(rows[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"mechanism"`, `"sensitivity"`, `"sensitivity_exact"`, `"sensitivity_method"`, `"loss"`, `"rmse"`, `"noise_memory_per_coord"`, `"step_time"`, `"step_rmse"`} {
		if !strings.Contains(string(js), key) {
			t.Fatalf("JSON %s lacks %s", js, key)
		}
	}
}

func TestCompareNamesFailingMechanism(t *testing.T) {
	w, _ := dpcore.PrefixSum(8)
	// 9 bands over 8 steps cannot be built.
	specs := named(t, "dpsgd,bandmf:9")
	_, err := Compare(context.Background(), w, dpcore.SingleParticipation(), specs, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "bandmf:9") {
		t.Fatalf("error %v does not name the failing mechanism", err)
	}
	specs = named(t, "tree-full/s3")
	if _, err := Compare(context.Background(), w, dpcore.SingleParticipation(), specs, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "tree-full/s3") {
		t.Fatalf("3 stamps of 8 steps: %v", err)
	}
	if _, err := Compare(context.Background(), w, dpcore.SingleParticipation(), nil, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("empty list: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	specs = named(t, "dpsgd")
	if _, err := Compare(ctx, w, dpcore.SingleParticipation(), specs, BuildOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	bad := []dpcore.Workload{{Kind: dpcore.PrefixSumKind, N: 0}, {Kind: dpcore.PrefixSumKind, N: -3}, {Kind: "nope", N: 4},
		{Kind: dpcore.MomentumKind, N: 4, Momentum: 0.9, Schedule: dpcore.Schedule{Explicit: []float64{1, math.NaN(), 1, 1}}}}
	for _, w := range bad {
		if _, err := DenseDPSGD(w); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("DenseDPSGD(%v): %v", w, err)
		}
		if _, err := BinaryTree(w, TreeOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("BinaryTree(%v): %v", w, err)
		}
		if _, err := DenseFFT(w, FFTOptimal); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("DenseFFT(%v): %v", w, err)
		}
		if _, err := BuildDense(ctx, DPSGD{}, w, dpcore.SingleParticipation(), BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("BuildDense(%v): %v", w, err)
		}
	}
	w, _ := dpcore.PrefixSum(10)
	if _, err := BinaryTree(w, TreeOptions{Decoder: 9}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown tree decoder: %v", err)
	}
	if _, err := DenseFFT(w, 9); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown FFT decoder: %v", err)
	}
	// k*b < n.
	kb, _ := dpcore.KBParticipation(2, 4)
	specs := named(t, "tree-full")
	if _, err := Compare(ctx, w, kb, specs, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("k*b < n accepted: %v", err)
	}
	if _, err := (BandMF{Bands: 11}).Build(ctx, w, dpcore.SingleParticipation(), BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("more bands than steps: %v", err)
	}
	// A singular block encoder (a zero column) is refused by the stamped
	// optimal decoder; a non-finite one by NewFactorization.
	singular := func(w0 dpcore.Workload) (*Factorization, error) {
		a, _ := w0.Matrix()
		c := mat.NewDense(w0.N, w0.N, nil)
		for i := 1; i < w0.N; i++ {
			c.Set(i, i, 1)
		}
		return &Factorization{Workload: w0, Encoder: c, Decoder: a}, nil
	}
	if _, err := Stamp(w, 2, singular, StampOptimal); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "rank") {
		t.Errorf("singular encoder: %v", err)
	}
	nonFinite := func(w0 dpcore.Workload) (*Factorization, error) {
		f, err := DenseDPSGD(w0)
		if err != nil {
			return nil, err
		}
		f.Encoder.Set(1, 1, math.Inf(1))
		return f, nil
	}
	if _, err := Stamp(w, 2, nonFinite, StampRestartedOnline); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("non-finite encoder: %v", err)
	}
}

// Above the dense limit, an optimized family is refused with the memory its
// optimizer would hold, not the dense build's alone: mf-kb at n = 10,000
// would need 44 matrices (32.8 GiB), which the refusal said was 3.7 GiB.
func TestDenseRefusalStatesTheOptimizersMemory(t *testing.T) {
	const n = 10000
	w, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.25, 0.05))
	sc, _ := dpcore.KBParticipation(n/20, 20)
	for _, c := range []struct {
		m    Mechanism
		want string
	}{
		{MFKB{}, "32.8 GiB (44 x 8 n^2 bytes)"},
		{BandMF{Bands: 20}, "5.2 GiB (7 x 8 n^2 bytes)"},
		{MFSingle{}, "13.4 GiB (18 x 8 n^2 bytes)"},
	} {
		_, err := BuildDense(context.Background(), c.m, w, sc, BuildOptions{})
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a refusal stating %q", c.m, err, c.want)
		}
	}
}
