package train

import (
	"context"
	"fmt"
	"time"

	"github.com/dpmf-go/dpmf/clip"
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

// TrainStep runs one step: sample (the private features may split the
// batch), clipped sum, noise (the features see the sum before and after
// it), divide by the expected batch size, optimizer update, then the
// private features' afterUpdate and the hooks (Hook). A step is
// all-or-nothing: on an error before the update the sampler is restored,
// so the next call draws the same batch and pairs it with the same noise
// row; the sampler, the noise source, the model and the optimizer advance
// together or not at all. An error of a Hook is returned after the step,
// which stands.
func (t *Trainer) TrainStep(ctx context.Context) (StepMetrics, error) {
	if t.broken != nil {
		return StepMetrics{}, t.broken
	}
	if err := ctx.Err(); err != nil {
		return StepMetrics{}, err
	}
	start := time.Now()
	// What the step will spend does not depend on its data: account for it
	// before anything changes.
	var eps float64
	if t.plan != nil {
		var err error
		if eps, err = t.plan.EpsilonSpent(t.Step() + 1); err != nil {
			return StepMetrics{}, fmt.Errorf("train: step %d: accounting: %w", t.Step()+1, err)
		}
	}
	// The sampler state is a few hundred bytes: saving it every step is
	// what lets a failed gather or clip leave the run where it was.
	saved, err := t.sampler.MarshalBinary()
	if err != nil {
		return StepMetrics{}, fmt.Errorf("train: step %d: saving sampler state: %w", t.Step()+1, err)
	}
	sm, err := t.sampleAndClip(ctx)
	if err == nil && t.plan == nil && sm.BatchSize > 0 && sm.NonFinite >= sm.BatchSize {
		// Without privacy the data may steer control flow: a batch none
		// of whose examples has a finite loss means the model has
		// diverged (the engines drop such examples, so the run would go
		// on with empty sums). A private run is stopped only by its
		// parameters (applyUpdate), which are released anyway.
		err = fmt.Errorf("train: step %d: %w: no example of the batch has a finite loss or gradient (learning rate too large for a run without clipping?)", sm.Step, ErrDiverged)
	}
	if err == nil && t.plan != nil {
		// The noise source checks its arguments before advancing, so an
		// error here leaves it at the previous step.
		if nerr := t.noise.Next(t.noiseBuf); nerr != nil {
			err = fmt.Errorf("train: step %d: noise: %w", sm.Step, nerr)
		}
	}
	if err != nil {
		if rerr := t.sampler.UnmarshalBinary(saved); rerr != nil {
			t.broken = fmt.Errorf("train: %w: step %d: %v; restoring the sampler failed: %v", ErrBroken, sm.Step, err, rerr)
			return StepMetrics{}, t.broken
		}
		return StepMetrics{}, err
	}
	// From here on the sampler and the noise have advanced: the update
	// and the private features' afterUpdate must succeed, or the trainer
	// is broken.
	if err := t.applyUpdate(sm.Step, sm.BatchSize); err != nil {
		t.broken = fmt.Errorf("train: %w: %w", ErrBroken, err)
		return StepMetrics{}, t.broken
	}
	for _, h := range t.private {
		if err := h.afterUpdate(&sm); err != nil {
			t.broken = fmt.Errorf("train: %w: step %d: %w", ErrBroken, sm.Step, err)
			return StepMetrics{}, t.broken
		}
	}
	sm.Epsilon, sm.NotPrivate = eps, stepNotPrivate()
	sm.StepSeconds = time.Since(start).Seconds()
	for _, h := range t.hooks {
		if err := h.AfterStep(ctx, sm, t.engine.Params()); err != nil {
			return sm, err
		}
	}
	return sm, nil
}

// applyUpdate adds the drawn noise to the clipped sum (the private
// features see the sum before and after it, and scale it), divides by the
// batch size and steps the optimizer (which leaves the parameters
// untouched when it refuses the gradient).
func (t *Trainer) applyUpdate(step, batch int) error {
	div := float64(max(batch, 1))
	if t.plan != nil {
		for _, h := range t.private {
			if err := h.beforeNoise(step, t.sum); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		std := float32(t.plan.NoiseStd * t.noiseScale())
		for i, w := range t.noiseBuf {
			t.sum[i] += std * w
		}
		for _, h := range t.private {
			if err := h.afterNoise(step, t.sum); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		// Dividing by the realized batch size would leak it: the expected
		// size is data independent (SPEC 7).
		div = t.sampler.ExpectedBatch()
	}
	inv := float32(1 / div)
	for i := range t.sum {
		t.sum[i] *= inv
	}
	if i := nonFinite(t.sum); i >= 0 {
		return fmt.Errorf("step %d: %w: non-finite update at coordinate %d (learning rate or clip norm too large?)", step, ErrDiverged, i)
	}
	params := t.engine.Params()
	if err := t.opt.Step(params, t.sum); err != nil {
		return fmt.Errorf("step %d: optimizer: %w", step, err)
	}
	// Examples whose loss overflows are dropped by the engines (each
	// contributes zero), so a diverged model would otherwise train on with
	// finite, empty sums to a NaN test loss.
	if i := nonFinite(params); i >= 0 {
		return fmt.Errorf("step %d: %w: parameter %d is not finite after the update (learning rate too large?)", step, ErrDiverged, i)
	}
	return nil
}

// clipChunk leaves in t.chunk the clipped gradient sum of the examples idx
// (at most chunkExamples of them). With multiplicity K the engine sees K
// augmented copies of each example, consecutive, and clips the mean of
// each example's K gradients (clip.Engine.UserClippedSum with Mean); the
// statistics then count examples, not copies.
func (t *Trainer) clipChunk(ctx context.Context, idx []int, step int) (clip.Stats, error) {
	k := t.cfg.Data.Augment.multiplicity()
	if pe, ok := t.engine.(PhysicalEngine); ok && t.pieces && len(idx) > len(t.yb) {
		return t.clipPieces(ctx, pe, idx, step)
	}
	if k == 1 {
		x, y, err := t.gather(idx, step)
		if err != nil {
			return clip.Stats{}, err
		}
		return t.engine.ClippedSumContext(ctx, x, y, t.chunk)
	}
	d := t.cfg.Data.Train
	s := d.Shape.Size()
	n := len(idx) * k
	x, y := t.xb[:n*s], t.yb[:n]
	for a, i := range idx {
		if i < 0 || i >= d.Len() {
			return clip.Stats{}, fmt.Errorf("gathering batch: index %d outside [0, %d)", i, d.Len())
		}
		for j := range k {
			r := a*k + j
			// Copy j of example i is keyed by i*K+j: distinct for every
			// copy, fixed by (seed, step, example, copy) alone.
			if err := t.augment.Apply(x[r*s:(r+1)*s], d.X[i*s:(i+1)*s], d.Shape, uint64(step), i*k+j); err != nil {
				return clip.Stats{}, fmt.Errorf("gathering batch: %w", err)
			}
			y[r] = d.Y[i]
		}
	}
	if cap(t.groups) < len(idx) {
		t.groups = make([]int, 0, len(idx))
	}
	t.groups = t.groups[:len(idx)]
	for a := range t.groups {
		t.groups[a] = k
	}
	if err := ctx.Err(); err != nil {
		return clip.Stats{}, err
	}
	// New checked that the engine has it.
	st, err := t.engine.(UserEngine).UserClippedSum(x, y, t.groups, clip.UserOptions{Mean: true}, t.chunk)
	if err != nil {
		return st, err
	}
	// The statistics count examples (the engine's "users"); its example
	// count is of copies.
	st.Examples = len(idx)
	return st, nil
}

// chunkExamples is how many examples one engine call takes: the engine's
// batch divided by the multiplicity.
func (t *Trainer) chunkExamples() int { return max(len(t.yb)/t.cfg.Data.Augment.multiplicity(), 1) }

// clipUsers leaves in t.sum the sum over the step's users (t.idx holds
// user indices) of each user's clipped gradient. Users never straddle a
// chunk: a user's examples are combined exactly before clipping.
func (t *Trainer) clipUsers(ctx context.Context, step int, sm *StepMetrics) error {
	u := t.users
	t.exIdx = u.expand(t.idx, step, t.exIdx)
	maxBatch := len(t.yb)
	var tl clip.Tally
	lo, g0 := 0, 0 // example and group at which the chunk starts
	for g0 < len(u.groups) {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi, g1 := lo, g0
		for g1 < len(u.groups) && hi+u.groups[g1] <= maxBatch+lo {
			hi += u.groups[g1]
			g1++
		}
		x, y, err := t.gather(t.exIdx[lo:hi], step)
		if err != nil {
			return err
		}
		var st clip.Stats
		if u.k == 1 {
			// One example per user: per-example clipping is per-user
			// clipping.
			st, err = t.engine.ClippedSumContext(ctx, x, y, t.chunk)
		} else {
			// New checked that the engine has it.
			st, err = t.engine.(UserEngine).UserClippedSum(x, y, u.groups[g0:g1], clip.UserOptions{Mean: u.mean}, t.chunk)
		}
		if err != nil {
			return err
		}
		t.addChunk(st)
		tl.Add(st, hi-lo, g1-g0)
		lo, g0 = hi, g1
	}
	st := tl.Stats()
	sm.Loss, sm.ClippedFrac, sm.NonFinite, sm.NormQuantiles = st.Loss, st.Clipped, st.NonFinite, st.NormQuantiles
	return nil
}

// clipByIndex is the clipped sum of an IndexEngine: the engine computes
// the whole batch's clipped sum into t.sum.
func (t *Trainer) clipByIndex(ctx context.Context, ie IndexEngine, step int, sm *StepMetrics) error {
	st, err := ie.ClippedSumIndices(ctx, step, t.idx, t.sum)
	if err != nil {
		return err
	}
	t.observe(st)
	sm.Loss, sm.ClippedFrac, sm.NonFinite, sm.NormQuantiles = st.Loss, st.Clipped, st.NonFinite, st.NormQuantiles
	return nil
}

// clipPieces writes the clipped sum of the examples idx (an engine
// batch, more than one piece) into t.chunk, gathering a piece at a time.
func (t *Trainer) clipPieces(ctx context.Context, pe PhysicalEngine, idx []int, step int) (clip.Stats, error) {
	return pe.ClippedSumPieces(ctx, len(idx), len(t.yb), func(lo, hi int) ([]float32, []int, error) {
		return t.gather(idx[lo:hi], step)
	}, t.chunk)
}
