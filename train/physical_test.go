package train

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/privacy"
)

// Issue 39 item 1: a logical batch gathered in physical pieces
// (Config.PhysicalBatch) has the clipped sum of one engine call on the
// whole batch, bit for bit, and a run's parameters do not depend on the
// physical batch; the gathering buffer holds only a piece.
func TestPhysicalBatchExactlyOneCall(t *testing.T) {
	ctx := context.Background()
	cfg := baseConfig(t)
	cfg.ModelName, cfg.Hidden, cfg.Batch, cfg.Steps = "mlp", []int{24}, 300, 3
	cfg.PhysicalBatch, cfg.NoiseMultiplier, cfg.Accountant = 64, 1, privacy.RDP
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pe := tr.engine.(PhysicalEngine)
	if g := pe.Granule(); len(tr.yb) != 64/g*g || !tr.pieces {
		t.Fatalf("gathering buffer of %d examples (pieces %v), want %d", len(tr.yb), tr.pieces, 64/g*g)
	}
	// The reference: one call of a second engine on the same model,
	// large enough for the whole batch.
	ref, err := clip.New(tr.model, clip.Options{Norm: cfg.ClipNorm, MaxBatch: 4 * cfg.Batch})
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= cfg.Steps; step++ {
		if _, err := tr.sampleAndClip(ctx); err != nil {
			t.Fatal(err)
		}
		if len(tr.idx) <= len(tr.yb) {
			t.Fatalf("step %d: batch of %d fits one piece: the test needs more", step, len(tr.idx))
		}
		x := make([]float32, len(tr.idx)*cfg.Train.Shape.Size())
		y := make([]int, len(tr.idx))
		if err := cfg.Train.Batch(tr.idx, x, y); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(tr.sum))
		if _, err := ref.ClippedSum(x, y, want); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(tr.sum[i]) != math.Float32bits(want[i]) {
				t.Fatalf("step %d (%d examples in pieces of %d): coordinate %d is %v, one call gives %v", step, len(tr.idx), len(tr.yb), i, tr.sum[i], want[i])
			}
		}
		// Move the parameters, as a step would.
		for i := range want {
			tr.engine.Params()[i] -= 1e-3 * want[i]
		}
	}

	// Whole runs: the same parameters at every physical batch.
	var first []float32
	for _, pb := range []int{64, 96, 1 << 20} {
		c := baseConfig(t)
		c.ModelName, c.Hidden, c.Batch, c.Steps = "mlp", []int{24}, 300, 5
		c.PhysicalBatch, c.NoiseMultiplier, c.Accountant = pb, 1, privacy.RDP
		tr, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		for !tr.Done() {
			if _, err := tr.TrainStep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p := tr.engine.Params()
		if first == nil {
			first = slices.Clone(p)
			continue
		}
		if !slices.Equal(p, first) {
			t.Fatalf("physical batch %d: parameters differ from those at 64", pb)
		}
	}
}
