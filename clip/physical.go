package clip

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// Granule is the number of examples every piece of ClippedSumPieces but
// the last holds a multiple of.
func (e *Engine) Granule() int { return e.plan.Granule() }

// ClippedSumPieces is ClippedSum of a batch of n examples that the caller
// gathers a piece at a time: gather(lo, hi) returns examples [lo, hi) of
// the batch (x, y as for ClippedSum), for pieces of piece examples (a
// multiple of Granule, at most MaxBatch) and the rest. When n > Granule,
// the sum written into dst and the Stats are ClippedSum's on the whole
// batch, bit for bit (nn.Plan.StepAdd): only a piece's examples are held
// at a time, as with Opacus's BatchMemoryManager, without changing the
// result. An error of gather or of ctx abandons the batch.
func (e *Engine) ClippedSumPieces(ctx context.Context, n, piece int, gather func(lo, hi int) ([]float32, []int, error), dst []float32) (Stats, error) {
	if g := e.Granule(); piece <= 0 || piece%g != 0 || piece > e.opt.MaxBatch {
		return Stats{}, dpcore.Invalid("clip", "clipped sum in pieces: pieces of %d examples, want a multiple of %d up to MaxBatch = %d", piece, g, e.opt.MaxBatch)
	}
	if n <= 0 {
		return Stats{}, dpcore.Invalid("clip", "clipped sum in pieces: a batch of %d examples", n)
	}
	e.acc.Begin(nil, n)
	e.off = 0
	e.plan.BeginAdd()
	e.adding = true
	defer func() { e.adding = false }()
	for lo := 0; lo < n; lo += piece {
		hi := min(lo+piece, n)
		x, y, err := gather(lo, hi)
		if err != nil {
			return Stats{}, err
		}
		if len(y) != hi-lo {
			return Stats{}, dpcore.Invalid("clip", "clipped sum in pieces: gather(%d, %d) gave %d examples", lo, hi, len(y))
		}
		if _, err := e.ClippedSumContext(ctx, x, y, dst); err != nil {
			return Stats{}, err
		}
	}
	if err := e.plan.SumInto(dst); err != nil {
		return Stats{}, fmt.Errorf("clip: clipped sum in pieces: %w", err)
	}
	return e.acc.Stats(), nil
}

// step runs the executor's pass for ClippedSumContext: the whole step,
// or, within ClippedSumPieces, one piece added to the batch's sum (its
// examples are units off... of the batch's Accumulator).
func (e *Engine) step(ctx context.Context, x []float32, y []int, dst []float32, c nn.Clipper) ([]float64, error) {
	if !e.adding {
		return e.plan.StepContext(ctx, x, y, dst, c)
	}
	return e.plan.StepAdd(ctx, x, y, c)
}
