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
