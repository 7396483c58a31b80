package noise

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// testToeplitzMechs are mfnoise.Toeplitz encoders of every structure at n steps:
// the square root, DP-SGD, banded positive decreasing, banded mixed sign,
// banded positive non-monotone, and BLTs with 1 to 5 buffers.
func testToeplitzMechs(t *testing.T, n int) []*mfnoise.Toeplitz {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(7, uint64(n)))
	var out []*mfnoise.Toeplitz
	add := func(m *mfnoise.Toeplitz, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	add(mfnoise.SqrtToeplitz(n))
	add(mfnoise.NewToeplitz("dpsgd", n, []float64{1}))
	for _, p := range []int{1, 2, 5} {
		if p <= n {
			add(mfnoise.BandedInverseSqrt(n, p))
		}
	}
	p := min(n, 5)
	dec, mixed, bump := make([]float64, p), make([]float64, p), make([]float64, p)
	dec[0], mixed[0], bump[0] = 1.3, 0.9, 1
	for j := 1; j < p; j++ {
		dec[j] = dec[j-1] * (0.3 + 0.6*rng.Float64())
		mixed[j] = rng.NormFloat64() * 0.5
		bump[j] = rng.Float64() * 1.5
	}
	add(mfnoise.NewToeplitz("dec", n, dec))
	add(mfnoise.NewToeplitz("mixed", n, mixed))
	add(mfnoise.NewToeplitz("bump", n, bump))
	for nb := 1; nb <= 5; nb++ {
		q := mfnoise.BLTParams{}
		for range nb {
			q.Theta = append(q.Theta, 0.2+0.79*rng.Float64())
			q.Omega = append(q.Omega, 0.8*rng.Float64()/float64(nb))
		}
		add(mfnoise.NewBLT(fmt.Sprintf("blt%d", nb), n, q))
	}
	return out
}

func toeplitzDense(c []float64) *mat.Dense {
	n := len(c)
	m := mat.NewDense(n, n, nil)
	for i := range n {
		for j := 0; j <= i; j++ {
			m.Set(i, j, c[i-j])
		}
	}
	return m
}

// TestToeplitzNoiseExact: the streamed W (float64) equals the dense C^-1 Z
// for the same z, and a checkpoint taken mid-stream resumes bit-identically.
func TestToeplitzNoiseExact(t *testing.T) {
	n, d := 40, 37
	seed := testSeed(5)
	z := zRows(seed, n, d)
	for _, m := range testToeplitzMechs(t, n) {
		s, err := newToeplitzSource[float64](m, d, NoiseOptions{Seed: seed, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ref mat.Dense
		if err := ref.Solve(toeplitzDense(m.Column()), eyeDense(n)); err != nil {
			t.Fatal(err)
		}
		t.Run(m.Name, func(t *testing.T) {
			checkAgainstRef(t, streamAll(t, s), &ref, z, 1e-11)
		})
		// Checkpoint at step 17, resume into a fresh source.
		a, _ := NewToeplitzNoise(m, d, NoiseOptions{Seed: seed})
		b, _ := NewToeplitzNoise(m, d, NoiseOptions{Seed: seed})
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
			for q := range buf {
				if buf[q] != buf2[q] {
					t.Fatalf("%s: resumed step %d differs", m.Name, i+1)
				}
			}
		}
		if err := b.Next(buf2); err == nil {
			t.Fatalf("%s: step past n accepted", m.Name)
		}
	}
}

// TestBuildToeplitzStreamsStructured: mfnoise.Build (the dense path the plan code
// uses) keeps the structured noise source: blt:4 streams with 4 buffers,
// not n stored rows, and the noise matches the dense C^-1 Z.
func TestBuildToeplitzStreamsStructured(t *testing.T) {
	n, d := 30, 11
	w, _ := mfnoise.PrefixSum(n)
	for _, name := range []string{"blt:4", "toeplitz:5", "sqrt", "bisr:4"} {
		spec, err := mfnoise.ParseMechanism(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := mfnoise.Build(context.Background(), spec, w, mfnoise.SingleParticipation(), mfnoise.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seed := testSeed(3)
		s, err := newNoiseSource[float64](f, d, NoiseOptions{Seed: seed})
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
	spec, _ := mfnoise.ParseMechanism("sqrt")
	f, err := mfnoise.Build(context.Background(), spec, w, mfnoise.SingleParticipation(), mfnoise.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seed := testSeed(4)
	s, err := newNoiseSource[float64](f, d, NoiseOptions{Seed: seed, MemoryBudget: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if k := s.base().kind; k == KindToeplitzRing {
		t.Fatalf("over-budget sqrt streamed with %s", k)
	}
	checkAgainstRef(t, streamAll(t, s), refG(t, f), zRows(seed, n, d), 1e-11)
	m, _ := mfnoise.SqrtToeplitz(n)
	if _, err := NewToeplitzNoise(m, d, NoiseOptions{MemoryBudget: 100}); err == nil || !strings.Contains(err.Error(), "over the budget") {
		t.Fatalf("sqrt source over budget: %v", err)
	}
}

// TestToeplitzNoiseBadInput: an empty mechanism and a square root over the
// memory budget are refused with an error, not a panic.
func TestToeplitzNoiseBadInput(t *testing.T) {
	if _, err := NewToeplitzNoise(&mfnoise.Toeplitz{Name: "x", N: 5}, 3, NoiseOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("empty mechanism: %v", err)
	}
	m, _ := mfnoise.SqrtToeplitz(100)
	if _, err := NewToeplitzNoise(m, 1000, NoiseOptions{MemoryBudget: 1 << 10}); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "over the budget") {
		t.Errorf("over budget: %v", err)
	}
}
