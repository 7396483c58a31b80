package train

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/clip"
)

// Augmentation multiplicity (De et al. 2022, "Unlocking High-Accuracy
// Differentially Private Image Classification through Scale", Sec. 3.1):
// each sampled example enters the step as K augmented copies whose
// gradients are averaged BEFORE clipping, so that the example still moves
// the clipped sum by at most the clip norm, and the privacy plan is the one
// of the run without multiplicity.

// Augmentation is Data.Augment: random crop (zero padding 4) and
// horizontal flip of each training example, drawn per example and step
// from the run's randomness, with Multiplicity K augmented copies of each
// sampled example whose gradients are averaged before clipping (0 or 1:
// one copy).
type Augmentation struct {
	Multiplicity int
}

// maxAugmentMultiplicity bounds Augmentation.Multiplicity.
const maxAugmentMultiplicity = 64

// multiplicity is the number of augmented copies of each example a step
// (1: the plain path, and without augmentation).
func (a *Augmentation) multiplicity() int {
	if a == nil {
		return 1
	}
	return max(a.Multiplicity, 1)
}

// checkAugment refuses what augmentation and its multiplicity cannot do.
func (c *Config) checkAugment() error {
	a := c.Data.Augment
	if a == nil {
		return nil
	}
	if c.Data.Features != FeaturesPixels {
		// The cached features cannot be reused: every step would
		// transform K x batch augmented images (about 2.4 CPU-ms each
		// for the scattering transform of a 28x28 image, BENCHMARKS.md:
		// over 6 CPU-hours for the Fashion-MNIST recipe at K = 4).
		return invalidf("augmentation crops and flips pixels, so it must come before the %s features, which are then computed afresh for every copy of every step (the cached features cannot be reused; over 6 CPU-hours for the Fashion-MNIST recipe at multiplicity 4): not supported; augment a pixel model (e.g. -model cnn)", c.Data.Features)
	}
	k := a.Multiplicity
	switch {
	case k < 0 || k > maxAugmentMultiplicity:
		return invalidf("augment multiplicity %d: want 1 to %d copies of each example (0: 1)", k, maxAugmentMultiplicity)
	case k <= 1:
		return nil
	case c.NonPrivate:
		return invalidf("augment multiplicity averages gradients before clipping; a non-private run does not clip: use one copy")
	case c.Privacy.UserBound != nil:
		return invalidf("augment multiplicity with user-level privacy is not supported: a user's examples are already combined before clipping")
	case len(c.Model.ClipPerLayer) > 0:
		return invalidf("augment multiplicity clips each example's averaged gradient as a whole: per-layer clipping is not supported")
	}
	return nil
}

// augmentationNote is the ledger's line for the run's augmentation.
func (a *Augmentation) note() []string {
	if a == nil {
		return nil
	}
	note := "random crop (zero padding 4) and horizontal flip of each training example, drawn per example and step from the run's randomness"
	if k := a.multiplicity(); k > 1 {
		note += fmt.Sprintf("; augmentation multiplicity %d (De et al. 2022): the gradients of %d augmented copies of each sampled example are averaged before clipping, so one example still moves the clipped sum by at most the clip norm", k, k)
	}
	return []string{note}
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

// settings is the checkpoint's record of the multiplicity, recorded only
// above 1, so checkpoints of runs without it resume.
func (a *Augmentation) settings() []setting {
	if k := a.multiplicity(); k > 1 {
		return []setting{{"augment multiplicity", fmt.Sprint(k)}}
	}
	return nil
}
