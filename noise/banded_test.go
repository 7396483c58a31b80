package noise

import (
	"bytes"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// testBand is a b-banded encoder with entries of both signs and one
// in-band zero (which the recursion must skip as the dense one does).
func testBand(n, b int) *mfnoise.BandedEncoder {
	e := &mfnoise.BandedEncoder{N: n, Bands: b, Band: make([]float64, n*b)}
	for j := 0; j < n; j++ {
		for d := 0; d < b && j+d < n; d++ {
			e.Band[j*b+d] = math.Sin(float64(3*j+7*d+1)) / float64(d+1)
		}
		e.Band[j*b] = 1 + 0.5*math.Cos(float64(j))
	}
	e.Band[2*b+1] = 0
	return e
}

// The banded strategy's noise is the dense encoder's: the same lags, the
// same bits and the same checkpoint, from O(b d) state and no n x n
// matrix.
func TestBandedNoiseMatchesDense(t *testing.T) {
	n, b, d := 70, 6, 40000 // two shards
	e := testBand(n, b)
	seed := testSeed(4)
	ban, err := newBandedRecursion[float64](e, d, Options{Seed: seed, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	den, err := newRecursion[float64](e.Dense(), d, Options{Seed: seed, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]float64, d), make([]float64, d)
	for i := 0; i < n; i++ {
		if err := ban.next(x); err != nil {
			t.Fatal(err)
		}
		if err := den.next(y); err != nil {
			t.Fatal(err)
		}
		for k := range x {
			if x[k] != y[k] {
				t.Fatalf("step %d coordinate %d: banded %v, dense %v", i, k, x[k], y[k])
			}
		}
		if i == n/2 {
			bs, _ := marshalStreamer[float64](ban)
			ds, _ := marshalStreamer[float64](den)
			if !bytes.Equal(bs, ds) {
				t.Fatal("banded and dense checkpoints differ")
			}
		}
	}
	if ban.base().kind != KindBanded || len(ban.ring) != b-1 {
		t.Errorf("kind %s with %d buffered rows, want %s with %d", ban.base().kind, len(ban.ring), KindBanded, b-1)
	}

	// Through New: a *mfnoise.BandedStrategy against its dense
	// factorization, float32.
	w, _ := dpcore.PrefixSum(n)
	st, err := e.For(w)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mfnoise.Dense(st)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := New(st, 100, Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(f, 100, Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	u, v := make([]float32, 100), make([]float32, 100)
	for i := 0; i < n; i++ {
		s1.Next(u)
		s2.Next(v)
		for k := range u {
			if u[k] != v[k] {
				t.Fatalf("New: step %d coordinate %d: banded %v, dense %v", i, k, u[k], v[k])
			}
		}
	}
	if s1.Kind() != s2.Kind() {
		t.Errorf("kinds %s and %s", s1.Kind(), s2.Kind())
	}
}

func TestBandedNoiseRefusesBadBand(t *testing.T) {
	e := testBand(10, 3)
	e.Band[0] = 0
	if _, err := newBandedRecursion[float32](e, 10, Options{}); err == nil {
		t.Error("a zero diagonal was accepted")
	}
	e = testBand(10, 3)
	if _, err := newBandedRecursion[float32](e, 1000, Options{MemoryBudget: 100}); err == nil {
		t.Error("a band over the memory budget was accepted")
	}
}
