package train

import (
	"context"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
)

// Hook is non-private work attached to the loop (the run's Hooks), as
// gomlx's training loop attaches its own: it runs after each step's
// update, in order, after the run's own hooks (the parameter average, the
// metrics record and Output.OnStep). It sees the step's metrics, whose
// not_private keys it must keep as private as the data, and the released
// parameters, which it must not write; never the private batch: whatever
// it computes is post-processing. An error stops Run; the step it follows
// stands.
type Hook interface {
	AfterStep(ctx context.Context, sm StepMetrics, params []float32) error
}

// HookFunc is a function used as a Hook.
type HookFunc func(ctx context.Context, sm StepMetrics, params []float32) error

// AfterStep calls f.
func (f HookFunc) AfterStep(ctx context.Context, sm StepMetrics, params []float32) error {
	return f(ctx, sm, params)
}

// runFacts are what an optional feature's checks read of the run's
// configuration (Config.facts), so that a feature's file holds its checks
// without reaching into the configuration.
type runFacts struct {
	nonPrivate, perUser, perLayer, checkpoints bool
	features                                   Features
	steps, batch                               int
	train                                      *data.Dataset // nil when the data are not known yet
}

// stepHook is a private feature's side of a step (audit canaries,
// adaptive clipping): the step calls it at fixed points, in the order
// docs/math.md fixes. Each point is narrow; a feature embeds noStepHook
// and implements the points it uses.
type stepHook interface {
	// batch is called once the step's batch is drawn: the feature may
	// take units out of it (the audit's canary slots) and starts its
	// count of the step.
	batch(idx []int) []int
	// observe sees the statistics of each clipped sum the step adds.
	observe(st clip.Stats)
	// beforeNoise and afterNoise see the clipped sum before the noise is
	// added and the released noisy sum; noiseScale multiplies the plan's
	// noise std.
	beforeNoise(step int, sum []float32) error
	noiseScale() float64
	afterNoise(step int, sum []float32) error
	// afterUpdate follows the optimizer's update; the trainer is broken
	// if it fails.
	afterUpdate(sm *StepMetrics) error
}

// noStepHook is the stepHook that does nothing at every point.
type noStepHook struct{}

func (noStepHook) batch(idx []int) []int            { return idx }
func (noStepHook) observe(clip.Stats)               {}
func (noStepHook) beforeNoise(int, []float32) error { return nil }
func (noStepHook) noiseScale() float64              { return 1 }
func (noStepHook) afterNoise(int, []float32) error  { return nil }
func (noStepHook) afterUpdate(*StepMetrics) error   { return nil }

// stateful is a feature whose state a checkpoint holds (the parameter
// average).
type stateful interface {
	saveState(ck *checkpointState)
	loadState(ck *checkpointState) error
}

// metricsHook records each step (the metrics file, Output.OnStep).
type metricsHook struct {
	w      *metricsWriter
	onStep func(StepMetrics)
}

func (m metricsHook) AfterStep(_ context.Context, sm StepMetrics, _ []float32) error {
	if m.w != nil {
		m.w.write("step", sm)
	}
	if m.onStep != nil {
		m.onStep(sm)
	}
	return nil
}
