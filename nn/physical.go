package nn

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// A logical batch larger than one wants to hold at once (its examples are
// gathered into one buffer) runs as physical pieces: BeginAdd, then
// StepAdd adds each piece's (clipped) gradients into the workers'
// accumulators, which it keeps between calls, and SumInto writes their
// sum. Each worker adds the batch's chunks of Options.Chunk examples in
// the order StepContext on the whole batch would, and SumInto adds the
// workers' sums as StepContext does, so the sum is the same bit for bit:
// the pieces change the memory, not the result. This needs every piece
// but the last to hold a multiple of Granule examples and the batch to
// hold more than Granule (StepContext shrinks its chunks for smaller
// batches).

// Granule is the number of examples every piece but the last of a
// StepAdd batch holds a multiple of: the workers times the chunk size.
func (p *Plan) Granule() int { return len(p.workers) * p.opt.Chunk }

// BeginAdd starts a batch of StepAdd pieces (abandoning one under way).
func (p *Plan) BeginAdd() {
	for _, w := range p.workers {
		clear(w.acc)
		w.dn, w.accDense = 0, true
	}
	p.adding, p.first, p.added = true, 0, 0
}

// StepAdd adds the (clipped) gradients of the piece x, y (the next
// examples of the batch BeginAdd started, at most MaxBatch) into the sum
// SumInto writes, as StepContext would for the whole batch. It returns
// the piece's losses, valid until the next call. On an error (ctx done,
// bad input) the batch is abandoned.
func (p *Plan) StepAdd(ctx context.Context, x []float32, y []int, clip Clipper) ([]float64, error) {
	if y == nil {
		return nil, dpcore.Invalid("nn", "step add: no labels")
	}
	if !p.adding {
		return nil, dpcore.Invalid("nn", "step add: no batch begun (BeginAdd)")
	}
	if p.first%p.Granule() != 0 {
		p.adding = false
		return nil, dpcore.Invalid("nn", "step add: the pieces before this one hold %d examples, not a multiple of Granule = %d", p.first, p.Granule())
	}
	if err := p.check(x, y, len(y)); err != nil {
		p.adding = false
		return nil, err
	}
	p.x, p.y, p.n, p.clip, p.private, p.ctx = x, y, len(y), clip, clip != nil, ctx
	p.run(modeAdd, nil)
	p.x, p.y, p.clip, p.ctx = nil, nil, nil, nil
	if ctx != nil && ctx.Err() != nil {
		p.adding = false
		return nil, fmt.Errorf("nn: step add: %w", ctx.Err())
	}
	p.first += len(y)
	p.added += p.chunks
	return p.loss[:len(y)], nil
}

// SumInto writes the sum of the gradients StepAdd added since BeginAdd
// into dst (len(params)) and ends the batch: it counts as one Step
// (dropout masks).
func (p *Plan) SumInto(dst []float32) error {
	if len(dst) != len(p.params) {
		return dpcore.Invalid("nn", "sum into: len(dst) = %d, want %d", len(dst), len(p.params))
	}
	if !p.adding {
		return dpcore.Invalid("nn", "sum into: no batch begun (BeginAdd), or it was abandoned")
	}
	p.active, p.dst = min(len(p.workers), p.added), dst
	for _, w := range p.workers[:p.active] {
		p.flushDense(w)
	}
	p.reduce(0, len(p.segs))
	p.dst = nil
	p.adding, p.first, p.added = false, 0, 0
	p.stepCount++
	return nil
}
