package noise

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// toeplitzMechs are Toeplitz encoders of every structure the sources
// stream, at n >= 5 steps: the square root, DP-SGD (one band), the banded
// inverse square root, 5-band encoders with decreasing, mixed-sign and
// non-monotone coefficients, and BLTs with 1 to 5 buffers (the kernels
// have cases for 1 to 4 and a general loop).
func toeplitzMechs(t *testing.T, n int) []*toeplitz.Encoder {
	t.Helper()
	var out []*toeplitz.Encoder
	keep := func(m *toeplitz.Encoder, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	keep(toeplitz.Sqrt(n))
	keep(toeplitz.BandedInverseSqrt(n, 5))
	for name, coef := range map[string][]float64{
		"dpsgd":        {1},
		"decreasing":   {1.3, 0.8, 0.5, 0.2, 0.1},
		"mixed-sign":   {0.9, -0.6, 0.3, 0.4, -0.2},
		"non-monotone": {1, 1.4, 0.2, 0.9, 0.5},
	} {
		keep(toeplitz.New(name, n, coef))
	}
	theta := []float64{0.97, 0.85, 0.6, 0.35, 0.2}
	omega := []float64{0.05, 0.2, 0.1, 0.15, 0.08}
	for nb := 1; nb <= 5; nb++ {
		keep(toeplitz.NewBLT(fmt.Sprintf("blt%d", nb), n, toeplitz.BLTParams{Theta: theta[:nb], Omega: omega[:nb]}))
	}
	return out
}

// TestToeplitzNoiseExact: the streamed W (float64) equals the dense C^-1 Z
// for the same z, and a checkpoint taken mid-stream resumes bit-identically.
func TestToeplitzNoiseExact(t *testing.T) {
	n, d := 40, 37
	seed := testSeed(5)
	z := zRows(seed, n, d)
	w := prefixW(t, n)
	for _, m := range toeplitzMechs(t, n) {
		s, err := newToeplitzSource[float64](m, d, Options{Seed: seed, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		f, err := mfnoise.Dense(&toeplitz.Strategy{Encoder: m, Workload: w}) // dense C and B = S C^-1
		if err != nil {
			t.Fatal(err)
		}
		t.Run(m.Name, func(t *testing.T) {
			checkAgainstRef(t, streamAll(t, s), refG(t, f), z, 1e-11)
		})
		// Checkpoint at step 17, resume into a fresh source.
		a, _ := NewToeplitz(m, d, Options{Seed: seed})
		b, _ := NewToeplitz(m, d, Options{Seed: seed})
		buf := make([]float32, d)
		for range 17 {
			a.Next(buf)
		}
		state, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.UnmarshalBinary(state); err != nil {
			t.Fatal(err)
		}
		buf2 := make([]float32, d)
		for i := 17; i < n; i++ {
			a.Next(buf)
			b.Next(buf2)
			if !slices.Equal(buf, buf2) {
				t.Fatalf("%s: resumed step %d differs", m.Name, i+1)
			}
		}
		if err := b.Next(buf2); err == nil {
			t.Fatalf("%s: step past n accepted", m.Name)
		}
	}
}

// TestBuildToeplitzStreamsStructured: mfnoise.BuildDense (the dense path
// the aggregator uses) keeps the structured noise source: blt:4 streams with 4 buffers,
// not n stored rows, and the noise matches the dense C^-1 Z.
func TestBuildToeplitzStreamsStructured(t *testing.T) {
	n, d := 30, 11
	w, _ := dpcore.PrefixSum(n)
	for _, spec := range []mfnoise.Mechanism{mfnoise.BLT{Buffers: 4}, mfnoise.BandedToeplitz{Bands: 5}, mfnoise.Sqrt{}, mfnoise.BISR{Bands: 4}} {
		name := spec.String()
		f, err := mfnoise.BuildDense(context.Background(), spec, w, dpcore.SingleParticipation(), mfnoise.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seed := testSeed(3)
		s, err := newNoiseSource[float64](f, d, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"blt:4": KindBLTBuffers, "toeplitz:5": KindToeplitzRing, "sqrt": KindToeplitzRing, "bisr:4": KindBISRRing}[name]
		if s.base().kind != want {
			t.Fatalf("%s: source %s, want %s", name, s.base().kind, want)
		}
		checkAgainstRef(t, streamAll(t, s), refG(t, f), zRows(seed, n, d), 1e-11)
	}
	// Under a memory budget the square root's n-1 rows do not fit: the
	// dense factorization falls back to regeneration, same noise.
	f, err := mfnoise.BuildDense(context.Background(), mfnoise.Sqrt{}, w, dpcore.SingleParticipation(), mfnoise.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seed := testSeed(4)
	s, err := newNoiseSource[float64](f, d, Options{Seed: seed, MemoryBudget: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if k := s.base().kind; k == KindToeplitzRing {
		t.Fatalf("over-budget sqrt streamed with %s", k)
	}
	checkAgainstRef(t, streamAll(t, s), refG(t, f), zRows(seed, n, d), 1e-11)
	m, _ := toeplitz.Sqrt(n)
	if _, err := NewToeplitz(m, d, Options{MemoryBudget: 100}); err == nil || !strings.Contains(err.Error(), "over the budget") {
		t.Fatalf("sqrt source over budget: %v", err)
	}
}

// TestToeplitzNoiseBadInput: an empty mechanism and a square root over the
// memory budget are refused with an error, not a panic.
func TestToeplitzNoiseBadInput(t *testing.T) {
	if _, err := NewToeplitz(&toeplitz.Encoder{Name: "x", N: 5}, 3, Options{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("empty mechanism: %v", err)
	}
	m, _ := toeplitz.Sqrt(100)
	if _, err := NewToeplitz(m, 1000, Options{MemoryBudget: 1 << 10}); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "over the budget") {
		t.Errorf("over budget: %v", err)
	}
}

// TestToeplitzIdentityIsIndependent: DP-SGD as a Toeplitz mechanism (c =
// (1)) streams as the independent source New gives its dense
// identity encoder, so the two agree bit for bit and share checkpoints.
func TestToeplitzIdentityIsIndependent(t *testing.T) {
	const n, d = 6, 9
	m, err := toeplitz.New("dpsgd", n, []float64{1})
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Seed: testSeed(2)}
	a, err := NewToeplitz(m, d, opt)
	if err != nil {
		t.Fatal(err)
	}
	dense, err := mfnoise.DenseDPSGD(prefixW(t, n))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(dense, d, opt)
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind() != KindIndependent || b.Kind() != KindIndependent {
		t.Fatalf("kinds %s and %s, want %s", a.Kind(), b.Kind(), KindIndependent)
	}
	x, y := make([]float32, d), make([]float32, d)
	a.Next(x)
	state, _ := a.MarshalBinary()
	if err := b.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	for a.Step() < n {
		a.Next(x)
		b.Next(y)
		if !slices.Equal(x, y) {
			t.Fatalf("step %d differs", a.Step())
		}
	}
}
