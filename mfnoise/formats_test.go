package mfnoise

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// Files written by the release at commit 3258d09 (testdata/formats): a
// factorization saved by SaveFactorization (smallOptimum(6)), the cache
// entry of formatCacheKey (the optimum for prefix sums, n = 6) and the
// cache entry of a BLT under formatToeplitzKey.

func formatCacheKey(t *testing.T) ProblemKey {
	w, err := dpcore.PrefixSum(6)
	if err != nil {
		t.Fatal(err)
	}
	return ProblemKey{Kind: "mf-single", Workload: w, Schema: dpcore.SingleParticipation(), Stamps: 1}
}

func formatToeplitzKey(t *testing.T) (ProblemKey, *toeplitz.Encoder) {
	w, err := dpcore.PrefixSum(12)
	if err != nil {
		t.Fatal(err)
	}
	blt, err := toeplitz.NewBLT("blt:2", 12, toeplitz.BLTParams{Theta: []float64{0.9, 0.5}, Omega: []float64{0.3, 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	return ProblemKey{Kind: "blt", Workload: w, Schema: dpcore.SingleParticipation(), Stamps: 1}, blt
}

// closeDense fails unless a and b (row-major) agree to 1e-9 relative to
// their largest entry: the optimizer's last bits depend on the machine.
func closeDense(t *testing.T, what string, a, b []float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d entries, want %d", what, len(a), len(b))
	}
	scale := 0.0
	for _, v := range b {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9*scale {
			t.Fatalf("%s: entry %d = %v, want %v", what, i, a[i], b[i])
		}
	}
}

func TestFormatFactorization3258d09(t *testing.T) {
	blob, err := os.ReadFile(filepath.Join("testdata", "formats", "factorization-3258d09.dpmf"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := LoadFactorization(bytes.NewReader(blob))
	if err != nil {
		t.Fatal(err)
	}
	want := smallOptimum(t, 6)
	if f.N() != 6 || f.Meta.Kind != want.Meta.Kind || !sameWorkload(f.Workload, want.Workload) {
		t.Fatalf("n = %d, kind %q, workload %v; want 6, %q, %v", f.N(), f.Meta.Kind, f.Workload, want.Meta.Kind, want.Workload)
	}
	closeDense(t, "encoder", f.Encoder.RawMatrix().Data, want.Encoder.RawMatrix().Data)
	closeDense(t, "decoder", f.Decoder.RawMatrix().Data, want.Decoder.RawMatrix().Data)
}

func TestFormatCacheEntry3258d09(t *testing.T) {
	blob, err := os.ReadFile(filepath.Join("testdata", "formats", "cache-entry-3258d09.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	key := formatCacheKey(t)
	c := &Cache{Dir: t.TempDir()}
	path, err := c.Path(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	builds := 0
	f, hit, err := c.GetOrBuild(context.Background(), key, countingBuild(key.Workload, &builds))
	if err != nil || !hit || builds != 0 {
		t.Fatalf("hit %v, builds %d, err %v: want the stored entry", hit, builds, err)
	}
	var want *Factorization
	if want, _, err = (*Cache)(nil).GetOrBuild(context.Background(), key, countingBuild(key.Workload, &builds)); err != nil {
		t.Fatal(err)
	}
	closeDense(t, "encoder", f.Encoder.RawMatrix().Data, want.Encoder.RawMatrix().Data)
	closeDense(t, "decoder", f.Decoder.RawMatrix().Data, want.Decoder.RawMatrix().Data)
}

func TestFormatToeplitzCacheEntry3258d09(t *testing.T) {
	blob, err := os.ReadFile(filepath.Join("testdata", "formats", "toeplitz-entry-3258d09.json"))
	if err != nil {
		t.Fatal(err)
	}
	key, want := formatToeplitzKey(t)
	c := &Cache{Dir: t.TempDir()}
	path, _, err := c.entry(key, ".json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	got, hit, err := c.getOrBuildToeplitz(context.Background(), key, func(context.Context) (*toeplitz.Encoder, error) {
		t.Fatal("rebuilt: the stored entry was not used")
		return nil, nil
	})
	if err != nil || !hit {
		t.Fatalf("hit %v, err %v", hit, err)
	}
	if got.Name != want.Name || got.N != want.N || got.BLT == nil ||
		!slices.Equal(got.BLT.Theta, want.BLT.Theta) || !slices.Equal(got.BLT.Omega, want.BLT.Omega) {
		t.Fatalf("entry %+v, want %+v", got, want)
	}
}
