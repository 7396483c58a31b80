package clip

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// TestTallyOfChunksIsTheBatch checks that the Stats of a batch clipped in
// chunks and added up by a Tally are the Stats of one call on the whole
// batch: the counts and the clipped fraction exactly, the maximum norm
// exactly, and, on a batch without non-finite examples (whose chunks'
// mean losses leave them out), the mean loss to float32 rounding (the
// executor forms the logits in float32, in blocks that follow the chunk).
func TestTallyOfChunksIsTheBatch(t *testing.T) {
	m, err := models.NewMLP([3]int{1, 4, 4}, []int{16}, 3, nn.ReLU, 3)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	e, err := New(m, Options{Norm: 3, LInfZero: 2, MaxBatch: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, extreme := range []bool{true, false} {
		x, y := goldenBatch(m, false, n, 5)
		if !extreme {
			x, y = randBatch(rand.New(rand.NewPCG(38, 5)), n, e.chw, m.Classes())
		}
		tallyOfChunks(t, e, x, y, extreme)
	}
}

func tallyOfChunks(t *testing.T, e *Engine, x []float32, y []int, extreme bool) {
	n := len(y)
	m := e.m
	sum := make([]float32, m.NumParams())
	whole, err := e.ClippedSum(x, y, sum)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(38, 4))
	var tl Tally
	for lo := 0; lo < n; {
		hi := min(lo+1+rng.IntN(13), n)
		st, err := e.ClippedSum(x[lo*e.chw:hi*e.chw], y[lo:hi], sum)
		if err != nil {
			t.Fatal(err)
		}
		tl.Add(st, hi-lo, hi-lo)
		lo = hi
	}
	got := tl.Stats()
	if got.Examples != whole.Examples || got.NonFinite != whole.NonFinite || got.Zeroed != whole.Zeroed || got.WithinNorm != whole.WithinNorm {
		t.Errorf("counts of the chunks %+v, of the batch %+v", got, whole)
	}
	if math.Abs(got.Clipped-whole.Clipped) > 1e-15 || got.NormQuantiles[3] != whole.NormQuantiles[3] {
		t.Errorf("the chunks' %+v, the batch's %+v", got, whole)
	}
	if extreme && (whole.NonFinite == 0 || whole.Zeroed == 0 || whole.WithinNorm == 0 || whole.Clipped == 0) {
		t.Errorf("the batch %+v does not exercise every count", whole)
	}
	if !extreme && (whole.NonFinite != 0 || math.Abs(got.Loss-whole.Loss) > 1e-6*whole.Loss) {
		t.Errorf("mean loss of the chunks %v, of the batch %v (non-finite %d)", got.Loss, whole.Loss, whole.NonFinite)
	}
	var two Tally
	two.Merge(tl)
	two.Merge(Tally{})
	if two.Stats() != got {
		t.Errorf("merged with an empty Tally: %+v, want %+v", two.Stats(), got)
	}
}
