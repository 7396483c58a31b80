package train

import (
	"fmt"
	"math"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/privacy"
)

// Adaptive clipping (Andrew et al. 2021) is Config.Privacy.Quantile, a
// privacy.QuantileRelease: the clip norm starts at Privacy.ClipNorm and
// follows a private estimate of the Target quantile of the per-example
// gradient norms; the count released each step has noise NoiseStd (0: the
// expected batch / 20, as in the paper) and the norm moves geometrically
// at LearningRate (0: 0.2). Its privacy cost is in the plan.

// Andrew et al.'s defaults: sigma_b = B/20, eta_C = 0.2.
const (
	defaultQuantileNoiseFrac = 1.0 / 20
	defaultQuantileRate      = 0.2
)

// quantileRelease is the release of q with its defaults filled in for an
// expected batch of batch units, or nil.
func quantileRelease(q0 *privacy.QuantileRelease, batch int) *privacy.QuantileRelease {
	if q0 == nil {
		return nil
	}
	q := *q0
	if q.NoiseStd == 0 {
		q.NoiseStd = defaultQuantileNoiseFrac * float64(batch)
	}
	if q.LearningRate == 0 {
		q.LearningRate = defaultQuantileRate
	}
	return &q
}

// normSetter is an engine whose flat clip norm can change between steps
// (clip.Engine.SetNorm).
type normSetter interface {
	SetNorm(norm float64) error
}

var _ normSetter = (*clip.Engine)(nil)

// adaptiveClip is the trainer's side of adaptive clipping: the clip norm
// C_t of the step under way, the count of its examples within C_t, and the
// generator of the count's noise (crypto/rand-seeded unless the run has a
// seed).
type adaptiveClip struct {
	noStepHook
	q        privacy.QuantileRelease
	c0, c    float64
	expected float64 // B, the expected batch
	within   int     // examples of the step under way with norm <= c
	eng      normSetter
	rng      *mrand.Rand
}

func newAdaptiveClip(p *privacy.Plan, eng Engine, expected float64, seed [32]byte) (*adaptiveClip, error) {
	if p == nil || p.Quantile == nil {
		return nil, nil
	}
	ns, ok := eng.(normSetter)
	if !ok {
		return nil, invalidf("adaptive clipping needs an engine whose clip norm can be set (SetNorm); this backend's cannot")
	}
	a := &adaptiveClip{q: *p.Quantile, c0: p.ClipNorm, c: p.ClipNorm, expected: expected, eng: ns, rng: mrand.New(mrand.NewChaCha8(seed))}
	if err := ns.SetNorm(a.c); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	return a, nil
}

// batch starts a step's count.
func (a *adaptiveClip) batch(idx []int) []int {
	a.within = 0
	return idx
}

// observe adds a clipped sum's count.
func (a *adaptiveClip) observe(st clip.Stats) { a.within += st.WithinNorm }

// noiseScale is C_t/C_0, by which the plan's noise std (set at C_0) is
// multiplied: the mechanism runs in units of the step's clip norm.
func (a *adaptiveClip) noiseScale() float64 { return a.c / a.c0 }

// afterUpdate records the step's clip norm, releases its noisy centred
// count of the sm.BatchSize units sampled, and moves the clip norm for
// the next step (Andrew et al. Alg. 1, geometric update).
func (a *adaptiveClip) afterUpdate(sm *StepMetrics) error {
	sm.ClipNorm = a.c
	r := float64(a.within) - float64(sm.BatchSize)/2 + a.q.NoiseStd*a.rng.NormFloat64()
	frac := r/a.expected + 0.5
	next := a.c * math.Exp(-a.q.LearningRate*(frac-a.q.Target))
	if !(next > 0) || math.IsInf(next, 0) {
		return fmt.Errorf("adaptive clipping: clip norm %v after %v", next, a.c)
	}
	a.c = next
	return a.eng.SetNorm(next)
}

// checkQuantile refuses what adaptive clipping (the run's
// Privacy.Quantile q) cannot do.
func checkQuantile(q *privacy.QuantileRelease, r runFacts) error {
	if q == nil {
		return nil
	}
	switch {
	case r.nonPrivate:
		return invalidf("adaptive clipping estimates the clip norm privately; a non-private run does not clip")
	case r.perLayer:
		return invalidf("adaptive clipping sets one flat clip norm: per-layer clipping is not supported")
	case r.checkpoints:
		return invalidf("adaptive clipping with checkpoints is not supported yet: the checkpoint does not hold the clip norm and the count noise's state")
	}
	if err := quantileRelease(q, r.batch).Check(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}
