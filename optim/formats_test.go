package optim

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// formatGrads is the gradient stream of TestResumeBitIdentical and of the
// optimizer state files in testdata/formats: d = 17, n = 24 (the state
// saved after step 9).
func formatGrads() (grads [][]float32, th0 []float32) {
	const d, n = 17, 24
	rng := rand.New(rand.NewPCG(5, 6))
	grads = make([][]float32, n)
	for i := range grads {
		grads[i] = make([]float32, d)
		for k := range grads[i] {
			grads[i][k] = float32(rng.NormFloat64())
		}
	}
	th0 = make([]float32, d)
	for k := range th0 {
		th0[k] = float32(rng.NormFloat64())
	}
	return grads, th0
}

// TestFormatState3258d09: the states of every optimizer written by the
// release at commit 3258d09 (after 9 of 24 steps) restore, and the run
// continues bit for bit as an uninterrupted one.
func TestFormatState3258d09(t *testing.T) {
	const d, n, cut = 17, 24, 9
	grads, th0 := formatGrads()
	for name, mk := range newTestOptimizers(t, d, n) {
		t.Run(name, func(t *testing.T) {
			blob, err := os.ReadFile(filepath.Join("testdata", "formats", name+"-3258d09.bin"))
			if err != nil {
				t.Fatal(err)
			}
			ref := mk()
			pr := append([]float32(nil), th0...)
			var pa []float32
			for i := range grads {
				if i == cut {
					pa = append([]float32(nil), pr...)
				}
				if err := ref.Step(pr, grads[i]); err != nil {
					t.Fatal(err)
				}
			}
			resumeFrom(t, zeroLike(ref), blob, pa, pr, grads, cut)
		})
	}
}

// resumeFrom restores the state blob (saved after step cut) into b, runs
// the remaining steps on pa (the parameters at cut) and requires them
// bit-identical to pr, the uninterrupted run's; it returns b.
func resumeFrom(t *testing.T, b Optimizer, blob []byte, pa, pr []float32, grads [][]float32, cut int) Optimizer {
	t.Helper()
	if err := b.UnmarshalBinary(blob); err != nil {
		t.Fatal(err)
	}
	if b.StepIndex() != cut {
		t.Fatalf("restored step %d, want %d", b.StepIndex(), cut)
	}
	for i := cut; i < len(grads); i++ {
		if err := b.Step(pa, grads[i]); err != nil {
			t.Fatal(err)
		}
	}
	for k := range pr {
		if math.Float32bits(pa[k]) != math.Float32bits(pr[k]) {
			t.Fatalf("param %d after the restore = %v, uninterrupted run %v", k, pa[k], pr[k])
		}
	}
	return b
}
