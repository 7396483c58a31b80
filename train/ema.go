package train

import (
	"context"
	"fmt"
)

// EMA is Optimizer.EMA: an exponential moving average of the parameters
// after each update, with decay Decay and the warm-up beta_t = min(Decay,
// (1+t)/(10+t)) at step t. Evaluations use the average, and the model
// holds it after Run. It is a function of the released noisy updates only
// (post-processing): it costs no privacy, and the ledger lists it. It
// attaches to the loop as a hook and its state is in the checkpoint.
type EMA struct {
	Decay float64
}

func (e *EMA) check() error {
	switch {
	case e == nil:
	case e.Decay == 0:
		return invalidf("EMA decay 0: a parameter average needs a decay in (0,1) (a nil EMA: no averaging)")
	case !(e.Decay > 0 && e.Decay < 1):
		return invalidf("EMA decay %v must lie in [0,1) (0: no averaging)", e.Decay)
	}
	return nil
}

// average is the exponential moving average of the parameters
// (Optimizer.EMA). It reads the parameters after each optimizer update and
// nothing else, so it is post-processing of the released noisy updates.
type average struct {
	beta  float64
	steps int
	avg   []float32
}

func newAverage(beta float64, params []float32) *average {
	return &average{beta: beta, avg: append([]float32(nil), params...)}
}

// decay is the weight of the old average at update t (1-based): the
// warm-up min(beta, (1+t)/(10+t)) keeps the initialization from
// dominating early averages.
func (a *average) decay(t int) float64 {
	return min(a.beta, float64(1+t)/float64(10+t))
}

// newEMA is the parameter average of e, or nil.
func (e *EMA) newAverage(params []float32) *average {
	if e == nil {
		return nil
	}
	return newAverage(e.Decay, params)
}

// settings is the checkpoint's record of the average.
func (e *EMA) settings() []setting {
	if e == nil {
		return nil
	}
	return []setting{{"parameter average", fmt.Sprintf("%g", e.Decay)}}
}

// AfterStep folds the parameters after the step's update into the
// average (a Hook).
func (a *average) AfterStep(_ context.Context, _ StepMetrics, params []float32) error {
	a.update(params)
	return nil
}

func (a *average) saveState(ck *checkpointState) { ck.Average, ck.EMASteps = a.avg, a.steps }

func (a *average) loadState(ck *checkpointState) error {
	if len(ck.Average) != len(a.avg) || ck.EMASteps != ck.Step {
		return fmt.Errorf("parameter average of %d values after %d updates, want %d values after %d", len(ck.Average), ck.EMASteps, len(a.avg), ck.Step)
	}
	copy(a.avg, ck.Average)
	a.steps = ck.EMASteps
	return nil
}

// update folds the parameters after one optimizer update into the
// average. A nil average does nothing.
func (a *average) update(params []float32) {
	if a == nil {
		return
	}
	a.steps++
	b := float32(a.decay(a.steps))
	for i, p := range params {
		a.avg[i] = b*a.avg[i] + (1-b)*p
	}
}

// swap exchanges the parameters and the average (twice restores them).
func (a *average) swap(params []float32) {
	if a == nil {
		return
	}
	for i := range params {
		params[i], a.avg[i] = a.avg[i], params[i]
	}
}

// install writes the average into the parameters.
func (a *average) install(params []float32) {
	if a != nil {
		copy(params, a.avg)
	}
}
