package clip

import (
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/models"
)

// TestSteadyStateAllocs checks that a training step allocates nothing (up
// to the goroutines that split it over the cores) once the engine is
// planned, for any batch size up to MaxBatch (Poisson sampling).
func TestSteadyStateAllocs(t *testing.T) {
	m, err := models.NewCIFARCNN([3]int{3, 16, 16}, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, nonPrivate := range []bool{false, true} {
		e, err := New(m, Options{Norm: 1, NonPrivate: nonPrivate, MaxBatch: 40})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		x, y := randBatch(rng, 40, e.chw, 10)
		dst := make([]float32, m.NumParams())
		sizes := []int{40, 23, 31, 1, 17}
		k := 0
		step := func() {
			n := sizes[k%len(sizes)]
			k++
			if _, err := e.ClippedSum(x[:n*e.chw], y[:n], dst); err != nil {
				t.Fatal(err)
			}
		}
		for range len(sizes) {
			step()
		}
		// Measured: 0; a goroutine start may cost an allocation elsewhere.
		if a := testing.AllocsPerRun(10, step); a > 2 {
			t.Errorf("nonPrivate=%v: %.1f allocations per step, want <= 2", nonPrivate, a)
		} else {
			t.Logf("nonPrivate=%v: %.1f allocations per step", nonPrivate, a)
		}
	}
}
