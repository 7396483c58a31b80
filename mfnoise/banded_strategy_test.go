package mfnoise

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"gonum.org/v1/gonum/mat"
)

// bandedTestProblem is the optimized bandmf:bands encoder of the recipe
// workload at n steps, with its dense factorization.
func bandedTestProblem(t *testing.T, n, bands int) (dpcore.Workload, *Result) {
	t.Helper()
	w, err := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.25, 0.05))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Optimize(context.Background(), Problem{Workload: w, Family: BandedFamily{Bands: bands}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Banded == nil || res.Factorization == nil {
		t.Fatal("banded optimizer returned no band or no factorization")
	}
	return w, res
}

func relDiff(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-300) }

// The banded strategy agrees with the dense factorization of the same
// encoder: sensitivity under every schema kind, row norms, loss, matrices.
func TestBandedStrategyMatchesDense(t *testing.T) {
	for _, tc := range []struct{ n, bands int }{{60, 5}, {97, 3}, {130, 20}} {
		w, res := bandedTestProblem(t, tc.n, tc.bands)
		s, err := res.Banded.For(w)
		if err != nil {
			t.Fatal(err)
		}
		f := res.Factorization
		schemas := []dpcore.Schema{dpcore.SingleParticipation(),
			{Kind: dpcore.KB, K: (tc.n + tc.bands - 1) / tc.bands, B: tc.bands},
			{Kind: dpcore.KB, K: 3, B: (tc.n + 2) / 3},
			{Kind: dpcore.MinSep, K: 4, B: tc.bands + 2}}
		for _, sc := range schemas {
			got, err := s.Sensitivity(sc)
			if err != nil {
				t.Fatalf("n=%d %s: %v", tc.n, sc, err)
			}
			want, err := f.Sensitivity(sc)
			if err != nil {
				t.Fatal(err)
			}
			if relDiff(got.Value, want.Value) > 1e-12 || got.Exact != want.Exact || got.Method != want.Method {
				t.Errorf("n=%d bands=%d %s: banded %+v, dense %+v", tc.n, tc.bands, sc, got, want)
			}
		}
		got, _ := s.DecoderRowNorms()
		want, _ := f.DecoderRowNorms()
		for i := range want {
			if relDiff(got[i], want[i]) > 1e-10 {
				t.Fatalf("n=%d: row %d norm %v, dense %v", tc.n, i, got[i], want[i])
			}
		}
		c, b, err := s.Matrices()
		if err != nil {
			t.Fatal(err)
		}
		if !mat.Equal(c, f.Encoder) || !mat.EqualApprox(b, f.Decoder, 1e-10) {
			t.Errorf("n=%d: dense matrices of the banded strategy differ from the factorization's", tc.n)
		}
		if got, err := EncoderBands(s); err != nil || got != tc.bands {
			t.Errorf("EncoderBands = %d, %v; want %d", got, err, tc.bands)
		}
		if cost, mem := (BandMF{}).NoiseCost(s, 1); cost != float64(tc.bands) || mem != "O(b d)" {
			t.Errorf("NoiseCost = %v %s", cost, mem)
		}
	}
}

// unitBand is a b-banded encoder with C[i,i] = 1 and C[i,i-d] = 0.1.
func unitBand(n, b int) *BandedEncoder {
	e := &BandedEncoder{N: n, Bands: b, Band: make([]float64, n*b)}
	for j := 0; j < n; j++ {
		for d := 0; d < b && j+d < n; d++ {
			e.Band[j*b+d] = 1
			if d > 0 {
				e.Band[j*b+d] = 0.1
			}
		}
	}
	return e
}

// Above dpcore.DenseStepLimit the row norms and sensitivity come from the
// band; what needs a dense matrix is refused with the memory it would need.
func TestBandedStrategyAboveDenseLimit(t *testing.T) {
	n := dpcore.DenseStepLimit + 1
	w, _ := dpcore.PrefixSum(n)
	s, err := unitBand(n, 3).For(w)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.DecoderRowNorms()
	if err != nil || len(r) != n || !(r[n-1] > 0) {
		t.Fatalf("row norms: %v (len %d)", err, len(r))
	}
	sens, err := s.Sensitivity(dpcore.Schema{Kind: dpcore.KB, K: 2, B: (n + 1) / 2})
	if want := math.Sqrt(2 * (1 + 0.01 + 0.01)); err != nil || relDiff(sens.Value, want) > 1e-14 || !sens.Exact {
		t.Errorf("sensitivity %+v, %v; want %v exact", sens, err, want)
	}
	if _, _, err := s.Matrices(); err == nil || !strings.Contains(err.Error(), "GiB") || !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("Matrices above the limit: %v", err)
	}
	if _, err := s.Sensitivity(dpcore.Schema{Kind: dpcore.KB, K: (n + 1) / 2, B: 2}); err == nil || !strings.Contains(err.Error(), "more bands than b") {
		t.Errorf("sensitivity with bands > b above the limit: %v", err)
	}
	if m, err := EncoderRows(s); err != nil || m != n {
		t.Errorf("EncoderRows = %d, %v; want %d", m, err, n)
	}
	if _, err := Dense(s); err == nil {
		t.Error("Dense of a banded strategy above the limit was not refused")
	}
}

func TestBandedEncoderValidate(t *testing.T) {
	bad := []*BandedEncoder{nil, {N: 3, Bands: 4, Band: make([]float64, 12)}, {N: 3, Bands: 2, Band: make([]float64, 5)},
		{N: 2, Bands: 1, Band: []float64{1, 0}}, {N: 2, Bands: 2, Band: []float64{1, math.NaN(), 1, 0}},
		{N: 2, Bands: 2, Band: []float64{1, 0, 1, 0.5}}}
	for i, e := range bad {
		if err := e.Validate(); err == nil {
			t.Errorf("case %d: accepted %+v", i, e)
		}
	}
	w, _ := dpcore.PrefixSum(5)
	if _, err := unitBand(4, 2).For(w); err == nil {
		t.Error("a 4-step encoder bound to a 5-step workload")
	}
}

// Built through the banded door (the path above the dense limit, forced
// here at a small n), bandmf gives the dense build's encoder bit for bit;
// the cache stores the band under its own kind, reads it back, and
// neither reader takes the other's entry.
func TestBandMFBandedBuildAndCache(t *testing.T) {
	n := 90
	w, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.25, 0.05))
	schema := dpcore.Schema{Kind: dpcore.KB, K: 9, B: 10}
	dir := t.TempDir()
	opt := BuildOptions{Cache: &Cache{Dir: dir}}
	ctx := context.Background()
	m := BandMF{Bands: 10}
	s1, err := m.buildBanded(ctx, w, schema, opt)
	if err != nil {
		t.Fatal(err)
	}
	f, err := BuildDense(ctx, m, w, schema, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !mat.Equal(s1.Encoder.Dense(), f.Encoder) {
		t.Fatal("banded build's encoder differs from the dense build's")
	}
	key := ProblemKey{Kind: "bandmf", Stamps: 1, Bands: 10, Workload: w}
	path, kb, err := opt.Cache.entry(key, bandedStoreExt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no cache entry: %v", err)
	}
	calls := 0
	e, hit, err := opt.Cache.getOrBuildBanded(ctx, key, func(context.Context) (*BandedEncoder, error) { calls++; return nil, errors.New("rebuilt") })
	if err != nil || !hit || calls != 0 {
		t.Fatalf("second read: hit %v, %d builds, %v", hit, calls, err)
	}
	for i := range e.Band {
		if e.Band[i] != s1.Encoder.Band[i] {
			t.Fatalf("band entry %d: read %v, stored %v", i, e.Band[i], s1.Encoder.Band[i])
		}
	}
	// A dense reader refuses the banded entry by its kind, and the banded
	// reader a dense one.
	if _, err := readEntry(path, kb); err == nil {
		t.Error("the dense reader took a banded entry")
	}
	dpath := t.TempDir() + "/dense.msgpack"
	payload, _ := encodeFactorization(f, kb)
	if err := atomicfile.WriteSealed(dpath, storeMagic, storeVersion, payload); err != nil {
		t.Fatal(err)
	}
	if _, err := readBandedEntry(dpath, kb); err == nil || !errors.Is(err, ErrCorrupt) {
		t.Errorf("the banded reader on a dense entry: %v", err)
	}
	// Another key, or a flipped byte, is rebuilt.
	other := key
	other.Bands = 9
	okb, _ := other.canonical()
	if _, err := readBandedEntry(path, okb); err == nil {
		t.Error("entry read under another key")
	}
	raw, _ := os.ReadFile(path)
	raw[len(raw)/2] ^= 1
	os.WriteFile(path, raw, 0o644)
	if _, err := readBandedEntry(path, kb); err == nil || !errors.Is(err, ErrCorrupt) {
		t.Errorf("corrupt entry: %v", err)
	}
}

// FuzzBandedEntry: decodeBanded never panics or allocates past its
// input, and what it accepts is a valid band.
func FuzzBandedEntry(f *testing.F) {
	e := unitBand(5, 2)
	good, _ := msgpackBanded(e)
	f.Add(good)
	f.Add([]byte{0x84})
	f.Fuzz(func(t *testing.T, payload []byte) {
		e, _, err := decodeBanded(payload)
		if err != nil {
			return
		}
		if e.Validate() != nil || len(e.Band) > len(payload) {
			t.Fatalf("accepted an invalid band %+v", e)
		}
	})
}
