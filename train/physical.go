package train

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/clip"
)

// PhysicalEngine is an Engine that takes a batch in pieces and returns
// the clipped sum it would give on the whole batch, bit for bit, when
// every piece but the last holds a multiple of Granule examples
// (clip.Engine). The trainer then gathers at most Config.PhysicalBatch
// examples at a time.
type PhysicalEngine interface {
	Engine
	Granule() int
	ClippedSumAdd(ctx context.Context, x []float32, y []int, scratch []float32) (clip.Stats, error)
	TakeSum(dst []float32) error
}

var _ PhysicalEngine = (*clip.Engine)(nil)

// DefaultPhysicalBatch is the physical batch of Config.PhysicalBatch 0:
// for the Fashion-MNIST recipe (batch 4096 of 3,969 scattering features)
// the gathered examples take 16 MiB instead of 65 MiB.
const DefaultPhysicalBatch = 1024

// physicalExamples is how many examples one engine call takes (the size
// of the gathering buffer), at most maxBatch (the engine's MaxBatch), and
// whether larger batches run as exact pieces (PhysicalEngine).
func (t *Trainer) physicalExamples(cfg *Config, maxBatch int) (int, bool) {
	pe, ok := t.engine.(PhysicalEngine)
	if !ok || cfg.UserLevel || cfg.multiplicity() > 1 {
		return maxBatch, false
	}
	want := cfg.PhysicalBatch
	if want <= 0 {
		want = DefaultPhysicalBatch
	}
	g := pe.Granule()
	p := min(want, maxBatch) / g * g
	if p < g {
		// The engine's MaxBatch holds less than one granule.
		return maxBatch, false
	}
	return p, true
}

// clipPieces is sampleAndClip's clipped sum of a batch larger than the
// physical batch: its pieces run one after the other through the
// engine's exact accumulation, gathering one piece at a time.
func (t *Trainer) clipPieces(ctx context.Context, pe PhysicalEngine, step int, sm StepMetrics) (StepMetrics, error) {
	p := t.chunkExamples()
	var lossSum float64
	for lo := 0; lo < len(t.idx); lo += p {
		if err := ctx.Err(); err != nil {
			return sm, err
		}
		hi := min(lo+p, len(t.idx))
		x, y, err := t.gather(t.idx[lo:hi], step)
		if err != nil {
			return sm, fmt.Errorf("train: step %d: %w", step, err)
		}
		st, err := pe.ClippedSumAdd(ctx, x, y, t.chunk)
		if err != nil {
			if ctx.Err() != nil {
				return sm, ctx.Err()
			}
			return sm, fmt.Errorf("train: step %d: %w", step, err)
		}
		t.adaptive.observe(st)
		sm.addChunk(st, hi-lo, &lossSum)
	}
	if err := pe.TakeSum(t.sum); err != nil {
		return sm, fmt.Errorf("train: step %d: %w", step, err)
	}
	sm.endChunks(lossSum)
	return sm, nil
}

// addChunk adds the statistics of a chunk of k examples; lossSum
// accumulates their loss.
func (sm *StepMetrics) addChunk(st clip.Stats, k int, lossSum *float64) {
	*lossSum += st.Loss * float64(k)
	sm.ClippedFrac += st.Clipped * float64(k)
	sm.NonFinite += st.NonFinite
	for q := range sm.NormQuantiles {
		sm.NormQuantiles[q] = math.Max(sm.NormQuantiles[q], st.NormQuantiles[q])
	}
}

// endChunks turns the chunks' sums into the batch's means.
func (sm *StepMetrics) endChunks(lossSum float64) {
	if sm.BatchSize > 0 {
		lossSum /= float64(sm.BatchSize)
		sm.ClippedFrac /= float64(sm.BatchSize)
	}
	sm.Loss = lossSum
}
