package mfnoise

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/gonum/mat"
)

func TestParseMechanism(t *testing.T) {
	good := map[string]MechanismSpec{
		"dpsgd":          {Name: "dpsgd", Kind: KindDPSGD, Stamps: 1},
		" tree-full/s5 ": {Name: "tree-full/s5", Kind: KindTreeFull, Stamps: 5},
		"mf-single/s2":   {Name: "mf-single/s2", Kind: KindMFSingle, Stamps: 2},
		"bandmf:8":       {Name: "bandmf:8", Kind: KindBandMF, Bands: 8, Stamps: 1},
		"bandmf:auto/s3": {Name: "bandmf:auto/s3", Kind: KindBandMF, AutoBands: true, Stamps: 3},
		"fft-opt":        {Name: "fft-opt", Kind: KindFFTOpt, Stamps: 1},
		"tree-online":    {Name: "tree-online", Kind: KindTreeOnline, Stamps: 1},
		"fft":            {Name: "fft", Kind: KindFFT, Stamps: 1},
		"mf-kb":          {Name: "mf-kb", Kind: KindMFKB, Stamps: 1},
	}
	for in, want := range good {
		got, err := ParseMechanism(in)
		if err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "tree", "bandmf", "bandmf:0", "bandmf:x", "dpsgd:3", "fft/s0", "fft/5", "fft/s", "fft/s-2", "mf-kb/s2/s3", "DPSGD"} {
		if _, err := ParseMechanism(in); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("ParseMechanism(%q) err = %v, want dpcore.ErrInvalid", in, err)
		}
	}
	if s, _ := ParseMechanism("bandmf:auto/s3"); s.String() != "bandmf:auto/s3" {
		t.Errorf("String() = %q", s.String())
	}
}

// The structured Gram matrices each mechanism hands to Compare must give
// exactly the sensitivity of the dense path, for every schema kind.
func TestStructuredSensitivityMatchesDense(t *testing.T) {
	w, _ := PrefixSum(12)
	kb, _ := KBParticipation(3, 4)
	ms, _ := MinSepParticipation(3, 4)
	schemas := []Schema{SingleParticipation(), kb, ms}
	for _, name := range []string{"dpsgd", "tree-online", "tree-full", "fft", "fft-opt", "tree-full/s3", "fft/s2", "tree-online/s4"} {
		spec, _ := ParseMechanism(name)
		for _, s := range schemas {
			f, x, err := build(context.Background(), spec, w, s, BuildOptions{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			fast, err := scoreSensitivity(f, x, s)
			if err != nil {
				t.Fatal(err)
			}
			dense, err := Sensitivity(mat.DenseCopyOf(f.Encoder), s)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(fast.Value-dense.Value) > 1e-12*dense.Value || fast.Method != dense.Method || fast.Exact != dense.Exact {
				t.Fatalf("%s under %v: structured %+v, dense %+v", name, s, fast, dense)
			}
		}
	}
}

func TestCompareRanksAndScores(t *testing.T) {
	w, _ := PrefixSum(16)
	s, _ := KBParticipation(4, 4)
	specs, _ := parseList("dpsgd,tree-online,tree-full,fft,fft-opt,tree-full/s2")
	rows, err := Compare(context.Background(), w, s, specs, BuildOptions{})
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
		// The loss is sens^2 ||B||_F^2 of the factorization Build returns.
		spec, _ := ParseMechanism(r.Mechanism)
		f, err := Build(context.Background(), spec, w, s, BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := f.Loss(s)
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
	if r := byName["fft"]; r.SensitivityMethod != NonnegativeGram || !r.SensitivityExact {
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
	w, _ := PrefixSum(8)
	// 9 bands over 8 steps cannot be built.
	specs, _ := parseList("dpsgd,bandmf:9")
	_, err := Compare(context.Background(), w, SingleParticipation(), specs, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "bandmf:9") {
		t.Fatalf("error %v does not name the failing mechanism", err)
	}
	specs, _ = parseList("tree-full/s3")
	if _, err := Compare(context.Background(), w, SingleParticipation(), specs, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "tree-full/s3") {
		t.Fatalf("3 stamps of 8 steps: %v", err)
	}
	if _, err := Compare(context.Background(), w, SingleParticipation(), nil, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("empty list: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	specs, _ = parseList("dpsgd")
	if _, err := Compare(ctx, w, SingleParticipation(), specs, BuildOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	bad := []Workload{{Kind: PrefixSumKind, N: 0}, {Kind: PrefixSumKind, N: -3}, {Kind: "nope", N: 4},
		{Kind: MomentumKind, N: 4, Momentum: 0.9, Schedule: Schedule{Explicit: []float64{1, math.NaN(), 1, 1}}}}
	for _, w := range bad {
		if _, err := DPSGD(w); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("DPSGD(%v): %v", w, err)
		}
		if _, err := BinaryTree(w, TreeOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("BinaryTree(%v): %v", w, err)
		}
		if _, err := FFT(w, FFTOptimal); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("FFT(%v): %v", w, err)
		}
		if _, err := Build(ctx, MechanismSpec{Name: "dpsgd", Kind: KindDPSGD}, w, SingleParticipation(), BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("Build(%v): %v", w, err)
		}
	}
	w, _ := PrefixSum(10)
	if _, err := BinaryTree(w, TreeOptions{Decoder: 9}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown tree decoder: %v", err)
	}
	if _, err := FFT(w, 9); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown FFT decoder: %v", err)
	}
	// k*b < n.
	kb, _ := KBParticipation(2, 4)
	specs, _ := parseList("tree-full")
	if _, err := Compare(ctx, w, kb, specs, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("k*b < n accepted: %v", err)
	}
	if _, err := Build(ctx, MechanismSpec{Name: "x", Kind: "x", Stamps: 1}, w, SingleParticipation(), BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := Build(ctx, MechanismSpec{Name: "bandmf:11", Kind: KindBandMF, Bands: 11, Stamps: 1}, w, SingleParticipation(), BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("more bands than steps: %v", err)
	}
	// A singular block encoder (a zero column) is refused by the stamped
	// optimal decoder; a non-finite one by NewFactorization.
	singular := func(w0 Workload) (*Factorization, error) {
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
	nonFinite := func(w0 Workload) (*Factorization, error) {
		f, err := DPSGD(w0)
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
