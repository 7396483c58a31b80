package train

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
)

// A step's clipped sum: New chooses how it is computed (clipExamples,
// clipUsers at user level, clipByIndex for an IndexEngine); each leaves
// the sum over the step's units (t.idx) of their clipped gradients in
// t.sum, fills the step's statistics and hands each engine call's Stats
// to the private features (Trainer.observe). It changes no state but the
// features' counts.

// sampleAndClip draws the next batch, lets the private features split it
// and leaves its clipped gradient sum in t.sum. It changes no state but
// the sampler's.
func (t *Trainer) sampleAndClip(ctx context.Context) (StepMetrics, error) {
	var err error
	step := t.sampler.Step() + 1
	t.idx, err = t.sampler.Next(t.idx)
	if err != nil {
		return StepMetrics{Step: step}, fmt.Errorf("train: step %d: %w", step, err)
	}
	for _, h := range t.private {
		t.idx = h.batch(t.idx)
	}
	clear(t.sum)
	sm := StepMetrics{Step: step, BatchSize: len(t.idx)}
	if err := t.clippedSum(ctx, step, &sm); err != nil {
		if ctx.Err() != nil {
			return sm, ctx.Err()
		}
		return sm, fmt.Errorf("train: step %d: %w", step, err)
	}
	return sm, checkClippedSum(step, t.sum)
}

// clipExamples is the clipped sum of example-level training. A Poisson
// batch can exceed the engine's batch: the clipped sum is additive, so
// larger batches run in chunks (each gathered in physical pieces when
// the engine takes them: physical.go).
func (t *Trainer) clipExamples(ctx context.Context, step int, sm *StepMetrics) error {
	maxBatch := t.chunkExamples()
	if t.pieces {
		maxBatch = t.engineBatch
	}
	var tl clip.Tally
	for lo := 0; lo < len(t.idx); lo += maxBatch {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(lo+maxBatch, len(t.idx))
		st, err := t.clipChunk(ctx, t.idx[lo:hi], step)
		if err != nil {
			return err
		}
		t.addChunk(st)
		tl.Add(st, hi-lo, hi-lo)
	}
	st := tl.Stats()
	sm.Loss, sm.ClippedFrac, sm.NonFinite, sm.NormQuantiles = st.Loss, st.Clipped, st.NonFinite, st.NormQuantiles
	return nil
}

// addChunk adds an engine call's clipped sum (t.chunk) to the step's and
// hands its statistics to the private features.
func (t *Trainer) addChunk(st clip.Stats) {
	t.observe(st)
	for i, v := range t.chunk {
		t.sum[i] += v
	}
}

// checkClippedSum refuses a clipped sum that is not finite. No data can
// make one: every engine scales each unit into the clip norm and drops a
// non-finite unit (docs/math.md, no data-dependent control flow), and the
// clip norm times the examples stays far inside the float32 range
// (maxClippedSum). An error here is an engine's defect; the step is not
// applied.
func checkClippedSum(step int, sum []float32) error {
	if i := nonFinite(sum); i >= 0 {
		return fmt.Errorf("train: step %d: non-finite clipped gradient sum at coordinate %d: the engine let a unit's data through unclipped (a defect; the step was not applied)", step, i)
	}
	return nil
}

// nonFinite is the index of the first NaN or infinity in v, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if x-x != 0 {
			return i
		}
	}
	return -1
}

func (t *Trainer) gather(idx []int, step int) ([]float32, []int, error) {
	train := t.cfg.Data.Train
	per := train.Shape.Size()
	x, y := t.xb[:len(idx)*per], t.yb[:len(idx)]
	var err error
	if t.cfg.Data.Augment != nil {
		err = t.augment.Batch(train, idx, uint64(step), x, y)
	} else {
		err = train.Batch(idx, x, y)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("gathering batch: %w", err)
	}
	return x, y, nil
}

func shapeOf(d *data.Dataset) [3]int { return [3]int{d.Shape.C, d.Shape.H, d.Shape.W} }
