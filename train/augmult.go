package train

import (
	"fmt"
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

// settings is the checkpoint's record of the multiplicity, recorded only
// above 1, so checkpoints of runs without it resume.
func (a *Augmentation) settings() []setting {
	if k := a.multiplicity(); k > 1 {
		return []setting{{"augment multiplicity", fmt.Sprint(k)}}
	}
	return nil
}

// check refuses what augmentation and its multiplicity cannot do.
func (a *Augmentation) check(r runFacts) error {
	if a == nil {
		return nil
	}
	if r.features != FeaturesPixels {
		// The cached features cannot be reused: every step would
		// transform K x batch augmented images (about 2.4 CPU-ms each
		// for the scattering transform of a 28x28 image, BENCHMARKS.md:
		// over 6 CPU-hours for the Fashion-MNIST recipe at K = 4).
		return invalidf("augmentation crops and flips pixels, so it must come before the %s features, which are then computed afresh for every copy of every step (the cached features cannot be reused; over 6 CPU-hours for the Fashion-MNIST recipe at multiplicity 4): not supported; augment a pixel model (e.g. -model cnn)", r.features)
	}
	k := a.Multiplicity
	switch {
	case k < 0 || k > maxAugmentMultiplicity:
		return invalidf("augment multiplicity %d: want 1 to %d copies of each example (0: 1)", k, maxAugmentMultiplicity)
	case k <= 1:
		return nil
	case r.nonPrivate:
		return invalidf("augment multiplicity averages gradients before clipping; a non-private run does not clip: use one copy")
	case r.perUser:
		return invalidf("augment multiplicity with user-level privacy is not supported: a user's examples are already combined before clipping")
	case r.perLayer:
		return invalidf("augment multiplicity clips each example's averaged gradient as a whole: per-layer clipping is not supported")
	}
	return nil
}
