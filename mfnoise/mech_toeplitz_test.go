package mfnoise

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// TestDenseRefusedWithMemory: Workload.Matrix and dense builds refuse sizes
// that cannot fit with the memory they need (n = 1e8 used to panic in
// makeslice, n = 50000 to die out of memory).
func TestDenseRefusedWithMemory(t *testing.T) {
	w, _ := dpcore.PrefixSum(100_000_000)
	if _, err := w.Matrix(); err == nil || !strings.Contains(err.Error(), "TiB") {
		t.Fatalf("Matrix at n = 1e8: %v", err)
	}
	w, _ = dpcore.PrefixSum(50_000)
	if _, err := (Tree{Decoder: TreeFull}).Build(context.Background(), w, dpcore.SingleParticipation(), BuildOptions{}); err == nil || !strings.Contains(err.Error(), "93.1 GiB") {
		t.Fatalf("tree-full at n = 50000: %v", err)
	}
	specs := named(t, "dpsgd,sqrt")
	rows, err := Compare(context.Background(), w, dpcore.SingleParticipation(), specs, BuildOptions{})
	if err != nil || len(rows) != 2 || rows[0].Mechanism != "sqrt" {
		t.Fatalf("structured compare at n = 50000: %v %v", rows, err)
	}
}

func TestNoiseMemoryPerCoord(t *testing.T) {
	w, _ := dpcore.PrefixSum(50)
	for name, want := range map[string]float64{"dpsgd": 1, "sqrt": 50, "bisr:7": 7, "toeplitz:9": 9, "blt:3": 4} {
		rows, err := Compare(context.Background(), w, dpcore.SingleParticipation(), named(t, name), BuildOptions{})
		if err != nil || rows[0].NoiseMemoryPerCoord != want {
			t.Fatalf("%s: memory/coord %v, want %v (%v)", name, rows[0].NoiseMemoryPerCoord, want, err)
		}
	}
}

// TestToeplitzCache: optimized Toeplitz mechanisms are stored as
// coefficients and reloaded bit-identically; a corrupted entry is detected
// by its checksum and rebuilt.
func TestToeplitzCache(t *testing.T) {
	dir := t.TempDir()
	opt := BuildOptions{Cache: &Cache{Dir: dir}}
	w, _ := dpcore.PrefixSum(300)
	schema, _ := dpcore.MinSepParticipation(3, 100)
	build := func(m Mechanism) (*toeplitz.Encoder, error) {
		st, err := m.Build(context.Background(), w, schema, opt)
		if err != nil {
			return nil, err
		}
		return st.(*toeplitz.Strategy).Encoder, nil
	}
	for _, c := range []struct {
		spec Mechanism
		kind string
		size int
	}{{BLT{Buffers: 3}, "blt", 3}, {BandedToeplitz{Bands: 7}, "toeplitz", 7}} {
		spec, name := c.spec, c.spec.String()
		a, err := build(spec)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, c.kind+"-*.json"))
		if len(files) != 1 {
			t.Fatalf("%s: %d cache files", name, len(files))
		}
		got, err := readToeplitzEntry(files[0], mustKey(t, c.kind, c.size, w, schema))
		if err != nil {
			t.Fatal(err)
		}
		la, _, _ := a.Loss(w, schema)
		lg, _, _ := got.Loss(w, schema)
		if la != lg {
			t.Fatalf("%s: reloaded loss %v, built %v", name, lg, la)
		}
		// A hit is served from the file: plant another valid mechanism
		// under the same key.
		planted := storedToeplitz{Key: mustKey(t, c.kind, c.size, w, schema), Name: name, N: 300, Coef: []float64{1, 0.5}}
		payload, _ := json.Marshal(planted)
		atomicfile.WriteSealed(files[0], toeplitzStoreMagic, toeplitzStoreVersion, payload)
		hit, err := build(spec)
		if err != nil || len(hit.Coef) != 2 || hit.Coef[1] != 0.5 {
			t.Fatalf("%s: cache hit not served from the file: %+v %v", name, hit, err)
		}
		data, _ := os.ReadFile(files[0])
		data[len(data)-3] ^= 1
		os.WriteFile(files[0], data, 0o644)
		if _, err := readToeplitzEntry(files[0], mustKey(t, c.kind, c.size, w, schema)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: corrupted entry read: %v", name, err)
		}
		b, err := build(spec)
		if err != nil {
			t.Fatal(err)
		}
		if lb, _, _ := b.Loss(w, schema); lb != la {
			t.Fatalf("%s: rebuilt loss %v, first %v", name, lb, la)
		}
		if _, err := readToeplitzEntry(files[0], mustKey(t, c.kind, c.size, w, schema)); err != nil {
			t.Fatalf("%s: rewritten entry: %v", name, err)
		}
	}
}

func mustKey(t *testing.T, kind string, size int, w dpcore.Workload, schema dpcore.Schema) string {
	k := ProblemKey{Kind: kind, Workload: w, Schema: schema, Bands: size, Stamps: 1}
	kb, err := k.canonical()
	if err != nil {
		t.Fatal(err)
	}
	return string(kb)
}

// TestCompareScaleLong is issue 18's scale target: compare at n = 1e5,
// min-sep (1000, 100), sqrt, toeplitz:64 and blt:4, in under 2 minutes
// with a heap well under 2 GiB. Long mode only.
func TestCompareScaleLong(t *testing.T) {
	if testing.Short() {
		t.Skip("long mode only (-short given): the n = 1e5 compare takes a minute")
	}
	w, _ := dpcore.PrefixSum(100_000)
	schema, _ := dpcore.MinSepParticipation(1000, 100)
	specs := named(t, "sqrt,toeplitz:64,blt:4")
	start := time.Now()
	rows, err := Compare(context.Background(), w, schema, specs, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%v, heap sys %d MiB", el, ms.HeapSys>>20)
	for _, r := range rows {
		t.Logf("%s loss %.4g sens %.4g exact %v build %.2f s", r.Mechanism, r.Loss, r.Sensitivity, r.SensitivityExact, r.BuildSeconds)
		if !r.SensitivityExact {
			t.Errorf("%s: sensitivity not exact", r.Mechanism)
		}
	}
	if el > 2*time.Minute || ms.HeapSys > 1<<30 {
		t.Fatalf("took %v with %d MiB of heap (targets 2 min, well under 2 GiB)", el, ms.HeapSys>>20)
	}
	if rows[0].Mechanism != "blt:4" {
		t.Fatalf("best is %s, want blt:4", rows[0].Mechanism)
	}
}
