package train

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

// Issue 39 item 1: a batch gathered in physical pieces
// (Memory.PhysicalBatch) gives the clipped sum and the step statistics
// of the unchunked step (the whole engine batch gathered and clipped in
// one call, as before pieces existed), bit for bit, at every step, and the
// same parameters at the end; only a piece is gathered at a time.
func TestPhysicalBatchExactlyUnchunked(t *testing.T) {
	ctx := context.Background()
	newTrainer := func(physical int) *Trainer {
		cfg := baseConfig(t)
		cfg.Model.Name, cfg.Model.Hidden, cfg.Privacy.Batch, cfg.Privacy.Steps = "mlp", []int{24}, 300, 6
		cfg.Privacy.NoiseMultiplier, cfg.Privacy.Accountant = 1, privacy.RDP
		cfg.Memory.PhysicalBatch = physical
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	whole := newTrainer(1 << 20)
	if whole.pieces || len(whole.yb) != 300 {
		t.Fatalf("physical batch above the batch: pieces %v, gathering %d examples, want none and 300", whole.pieces, len(whole.yb))
	}
	for _, physical := range []int{64, 100} {
		tr := newTrainer(physical)
		g := tr.engine.(PhysicalEngine).Granule()
		if want := max(physical/g*g, g); !tr.pieces || len(tr.yb) != want {
			t.Fatalf("physical batch %d: pieces %v, gathering %d examples, want %d", physical, tr.pieces, len(tr.yb), want)
		}
		ref := newTrainer(1 << 20)
		pieced := 0
		for !tr.Done() {
			sm, err := tr.sampleAndClip(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ref.sampleAndClip(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tr.idx, ref.idx) {
				t.Fatal("the two runs drew different batches")
			}
			if len(tr.idx) > len(tr.yb) {
				pieced++
			}
			for i := range tr.sum {
				if math.Float32bits(tr.sum[i]) != math.Float32bits(ref.sum[i]) {
					t.Fatalf("physical batch %d, step %d (%d examples): coordinate %d is %v, unchunked %v", physical, sm.Step, len(tr.idx), i, tr.sum[i], ref.sum[i])
				}
			}
			sm.StepSeconds, want.StepSeconds = 0, 0
			if !reflect.DeepEqual(sm, want) {
				t.Fatalf("physical batch %d, step %d: statistics %+v, unchunked %+v", physical, sm.Step, sm, want)
			}
			// Finish both steps (noise, update) the same way.
			for _, r := range []*Trainer{tr, ref} {
				if err := r.noise.Next(r.noiseBuf); err != nil {
					t.Fatal(err)
				}
				if err := r.applyUpdate(sm.Step, sm.BatchSize); err != nil {
					t.Fatal(err)
				}
			}
		}
		if pieced == 0 {
			t.Fatalf("physical batch %d: no step was gathered in pieces", physical)
		}
		if !slices.Equal(tr.engine.Params(), ref.engine.Params()) {
			t.Fatalf("physical batch %d: parameters differ at the end", physical)
		}
	}
}
