package clip

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/nn"
)

// Physical batches: a logical batch larger than one wants to gather at
// once runs as pieces (ClippedSumAdd each, then TakeSum), with the
// clipped sum ClippedSum would give on the whole batch, bit for bit, when
// every piece but the last holds a multiple of Granule examples and the
// batch more than Granule (nn.Plan.StepAdd). Only the pieces' examples
// are held at a time: what Opacus's BatchMemoryManager does, without
// changing the sum.

// Granule is the number of examples every piece of a batch but the last
// must hold a multiple of.
func (e *Engine) Granule() int { return e.plan.Granule() }

// ClippedSumAdd is ClippedSumContext for the next piece x, y of a batch
// (at most MaxBatch examples): its clipped gradients are added to the
// batch's sum, which TakeSum writes; scratch (len NumParams) is not
// written. The Stats are the piece's.
func (e *Engine) ClippedSumAdd(ctx context.Context, x []float32, y []int, scratch []float32) (Stats, error) {
	e.adding = true
	defer func() { e.adding = false }()
	return e.ClippedSumContext(ctx, x, y, scratch)
}

// TakeSum writes the clipped sum of the pieces given to ClippedSumAdd
// since the last TakeSum into dst (len NumParams) and ends the batch.
func (e *Engine) TakeSum(dst []float32) error {
	if err := e.plan.SumInto(dst); err != nil {
		return fmt.Errorf("clip: take sum: %w", err)
	}
	return nil
}

// step runs the executor's pass for ClippedSumContext: the whole step,
// or, for ClippedSumAdd, one piece added to the batch's sum.
func (e *Engine) step(ctx context.Context, x []float32, y []int, dst []float32, c nn.Clipper) ([]float64, error) {
	if e.adding {
		return e.plan.StepAdd(ctx, x, y, c)
	}
	return e.plan.StepContext(ctx, x, y, dst, c)
}
