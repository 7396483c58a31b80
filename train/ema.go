package train

import "fmt"

// average is the exponential moving average of the parameters
// (Config.EMA). It reads the parameters after each optimizer update and
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

// postprocessing describes cfg's post-processing for the ledger.
func postprocessing(cfg *Config) []string {
	var out []string
	if cfg.Optimizer == OptimizerAdam {
		out = append(out, "Adam: its moments and updates are computed from the privatized gradients only")
	}
	if cfg.EMA > 0 {
		out = append(out, fmt.Sprintf("exponential moving average of the parameters (decay %g) evaluated and returned as the model", cfg.EMA))
	}
	return out
}
