package train

import (
	"context"

	"github.com/dpmf-go/dpmf/clip"
)

// IndexEngine is an Engine whose examples live elsewhere, e.g. on worker
// processes that each hold a shard of the training data (package
// train/distributed). The loop samples the batch as always and hands the
// engine the sampled example indices instead of the gathered examples;
// the noise, the division by the expected batch size and the optimizer
// stay in the loop, so the plan, the ledger and the checkpoints are those
// of a single-process run with the same settings.
type IndexEngine interface {
	Engine
	// ClippedSumIndices writes into dst (len(Params())) the sum of the
	// clipped gradients, at the current Params, of the training examples
	// idx (increasing indices into Data.Train) for step (1-based), and
	// returns the batch's statistics. It is all-or-nothing: on an error dst
	// is not used and the loop rolls the step back.
	ClippedSumIndices(ctx context.Context, step int, idx []int, dst []float32) (clip.Stats, error)
}
