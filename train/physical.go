package train

import (
	"context"

	"github.com/dpmf-go/dpmf/clip"
)

// PhysicalEngine is an Engine that takes a batch a piece at a time and
// gives the clipped sum and Stats of one ClippedSumContext call on the
// whole batch, bit for bit (clip.Engine.ClippedSumPieces). The trainer
// then gathers at most Config.Memory.PhysicalBatch examples at once.
type PhysicalEngine interface {
	Engine
	// Granule is what the pieces' size must be a multiple of.
	Granule() int
	ClippedSumPieces(ctx context.Context, n, piece int, gather func(lo, hi int) ([]float32, []int, error), dst []float32) (clip.Stats, error)
}

var _ PhysicalEngine = (*clip.Engine)(nil)

// DefaultPhysicalBatch is the physical batch of Config.Memory.PhysicalBatch 0:
// for the Fashion-MNIST recipe (batch 4096 of 3,969 scattering features)
// the gathered examples take 16 MiB instead of 65 MiB.
const DefaultPhysicalBatch = 1024

// physicalExamples is how many examples are gathered at once (the size
// of the gathering buffer) for an engine taking batches of maxBatch, and
// whether an engine batch larger than that is gathered in pieces.
func (t *Trainer) physicalExamples(cfg *Config, maxBatch int) (int, bool) {
	pe, ok := t.engine.(PhysicalEngine)
	if !ok || cfg.Privacy.UserBound != nil || cfg.Data.Augment.multiplicity() > 1 {
		return maxBatch, false
	}
	want := cfg.Memory.PhysicalBatch
	if want <= 0 {
		want = DefaultPhysicalBatch
	}
	g := pe.Granule()
	p := max(want/g*g, g)
	if p >= maxBatch {
		return maxBatch, false
	}
	return p, true
}

// clipPieces writes the clipped sum of the examples idx (an engine
// batch, more than one piece) into t.chunk, gathering a piece at a time.
func (t *Trainer) clipPieces(ctx context.Context, pe PhysicalEngine, idx []int, step int) (clip.Stats, error) {
	return pe.ClippedSumPieces(ctx, len(idx), len(t.yb), func(lo, hi int) ([]float32, []int, error) {
		return t.gather(idx[lo:hi], step)
	}, t.chunk)
}
