package noise

import (
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// formatSources builds, with the given seed, the sources whose states the
// release at commit 3258d09 wrote to testdata/formats (n = 12, d = 40,
// after 5 steps): those of TestStateFormatUnchanged whose decoders do not
// depend on the machine's BLAS kernels.
func formatSources(t *testing.T, seed byte) map[string]Source {
	out := testSources(t, seed)
	for name := range out {
		if strings.HasPrefix(name, "tall-optimal") || name == "tree-honaker-online/momentum" {
			delete(out, name)
		}
	}
	return out
}

func formatFile(name string) string {
	return filepath.Join("testdata", "formats", strings.NewReplacer("/", "_", ":", "_").Replace(name)+"-3258d09.bin")
}

// TestFormatSourceState3258d09: the state of every source kind written by
// the release at commit 3258d09 (seed 9, after 5 of 12 steps) restores
// into a source built with another seed, which then draws, bit for bit,
// the noise of an uninterrupted source.
func TestFormatSourceState3258d09(t *testing.T) {
	const d, at = 40, 5
	ref, fresh := formatSources(t, 9), formatSources(t, 77)
	if len(ref) != 16 {
		t.Fatalf("%d sources, want the 16 of TestStateFormatUnchanged", len(ref))
	}
	for name, r := range ref {
		state, err := os.ReadFile(formatFile(name))
		if err != nil {
			t.Fatal(err)
		}
		s := fresh[name]
		if err := s.UnmarshalBinary(state); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Step() != at {
			t.Fatalf("%s: restored at step %d, want %d", name, s.Step(), at)
		}
		want, got := make([]float32, d), make([]float32, d)
		for range at {
			if err := r.Next(want); err != nil {
				t.Fatal(err)
			}
		}
		for r.Step() < r.N() {
			if err := r.Next(want); err != nil {
				t.Fatal(err)
			}
			if err := s.Next(got); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: step %d noise %d = %v, uninterrupted %v", name, r.Step(), i, got[i], want[i])
				}
			}
		}
	}
}

// TestFormatExactRows3258d09: the state of an exact-rows stream written by
// the release at commit 3258d09 (seed 5, variance 2^40/3, m = 4, d = 3,
// after 1 row) restores and draws the rows an uninterrupted stream draws.
func TestFormatExactRows3258d09(t *testing.T) {
	state, err := os.ReadFile(filepath.Join("testdata", "formats", "exact-rows-3258d09.bin"))
	if err != nil {
		t.Fatal(err)
	}
	v := big.NewRat(1<<40, 3)
	a, err := NewExactRows(4, 3, v, testSeed(5))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewExactRows(4, 3, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	want, got := make([]*big.Int, 3), make([]*big.Int, 3)
	if err := a.Next(want); err != nil {
		t.Fatal(err)
	}
	for a.Step() < 4 {
		if err := a.Next(want); err != nil {
			t.Fatal(err)
		}
		if err := b.Next(got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i].Cmp(want[i]) != 0 {
				t.Fatalf("row %d: %v, uninterrupted %v", a.Step(), got, want)
			}
		}
	}
}
