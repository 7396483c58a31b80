package optim

import (
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
)

// AdamOptions configures Adam. A zero field selects its default.
type AdamOptions struct {
	// Beta1 and Beta2 are the moment decay rates; 0 means 0.9 and 0.999.
	Beta1, Beta2 float64
	// Eps is added to the root of the second moment; 0 means 1e-8.
	Eps float64
	// WeightDecay lambda >= 0 turns Adam into AdamW: decoupled decay
	// theta *= 1 - eta_i lambda before the Adam step.
	WeightDecay float64
}

func (o AdamOptions) withDefaults() AdamOptions {
	if o.Beta1 == 0 {
		o.Beta1 = 0.9
	}
	if o.Beta2 == 0 {
		o.Beta2 = 0.999
	}
	if o.Eps == 0 {
		o.Eps = 1e-8
	}
	return o
}

// Adam is Adam (Kingma & Ba) with bias correction and a fixed learning-rate
// schedule, or AdamW with WeightDecay > 0:
//
//	m_i = b1 m_{i-1} + (1-b1) g_i,  v_i = b2 v_{i-1} + (1-b2) g_i^2,
//	theta_i = (1 - eta_i lambda) theta_{i-1}
//	          - eta_i (m_i/(1-b1^i)) / (sqrt(v_i/(1-b2^i)) + eps).
//
// Adam is not linear in the gradient stream, so no workload describes it.
// Private training with Adam is post-processing of the privatized gradients;
// factorize the mechanism for the prefix sum (dpcore.PrefixSum), which
// releases the privatized running sums, and let Adam read them.
type Adam struct {
	dim   int
	opt   AdamOptions
	sched dpcore.Schedule
	rates []float64
	step  int
	prec  precision
	m32   []float32
	v32   []float32
	m64   []float64
	v64   []float64
}

// NewAdam returns Adam over dim parameters for steps steps with schedule s.
func NewAdam(dim int, s dpcore.Schedule, steps int, opt AdamOptions) (*Adam, error) {
	if dim <= 0 {
		return nil, invalidf("adam: dimension %d must be positive", dim)
	}
	opt = opt.withDefaults()
	if !(opt.Beta1 > 0 && opt.Beta1 < 1) || !(opt.Beta2 > 0 && opt.Beta2 < 1) {
		return nil, invalidf("adam: betas (%v, %v) must lie in (0,1)", opt.Beta1, opt.Beta2)
	}
	if !(opt.Eps > 0) || math.IsInf(opt.Eps, 0) {
		return nil, invalidf("adam: eps %v must be finite and positive", opt.Eps)
	}
	if !(opt.WeightDecay >= 0) || math.IsInf(opt.WeightDecay, 0) {
		return nil, invalidf("adam: weight decay %v must be finite and >= 0", opt.WeightDecay)
	}
	rates, err := scheduleRates(s, steps)
	if err != nil {
		return nil, fmt.Errorf("%w (adam)", err)
	}
	return &Adam{dim: dim, opt: opt, sched: s, rates: rates}, nil
}

// Step applies one Adam update in place.
func (o *Adam) Step(params, grad []float32) error {
	if err := checkStep(o.dim, o.step, len(o.rates), params, grad); err != nil {
		return err
	}
	if o.prec == prec64 {
		return invalidf("adam: step: optimizer runs in float64")
	}
	if o.prec == precUnset {
		o.prec, o.m32, o.v32 = prec32, make([]float32, o.dim), make([]float32, o.dim)
	}
	o.step++
	adamUpdate(params, grad, o.m32, o.v32, o.rates[o.step-1], o.step, o.opt)
	return nil
}

// Step64 is Step in float64. An optimizer runs in one precision only.
func (o *Adam) Step64(params, grad []float64) error {
	if err := checkStep(o.dim, o.step, len(o.rates), params, grad); err != nil {
		return err
	}
	if o.prec == prec32 {
		return invalidf("adam: step: optimizer runs in float32")
	}
	if o.prec == precUnset {
		o.prec, o.m64, o.v64 = prec64, make([]float64, o.dim), make([]float64, o.dim)
	}
	o.step++
	adamUpdate(params, grad, o.m64, o.v64, o.rates[o.step-1], o.step, o.opt)
	return nil
}

func adamUpdate[T float32 | float64](params, grad, m, v []T, eta float64, t int, opt AdamOptions) {
	b1, b2 := T(opt.Beta1), T(opt.Beta2)
	c1 := 1 / (1 - math.Pow(opt.Beta1, float64(t)))
	c2 := 1 / (1 - math.Pow(opt.Beta2, float64(t)))
	e := T(eta * c1)
	sc2 := T(c2)
	eps := T(opt.Eps)
	decay := T(1 - eta*opt.WeightDecay)
	m, v, params = m[:len(grad)], v[:len(grad)], params[:len(grad)]
	for i, g := range grad {
		mi := b1*m[i] + (1-b1)*g
		vi := b2*v[i] + (1-b2)*g*g
		m[i], v[i] = mi, vi
		params[i] = decay*params[i] - e*mi/(T(math.Sqrt(float64(vi*sc2)))+eps)
	}
}

// StepIndex is the number of steps taken.
func (o *Adam) StepIndex() int { return o.step }

// Steps is the number of scheduled steps.
func (o *Adam) Steps() int { return len(o.rates) }

// Schedule is the learning-rate schedule.
func (o *Adam) Schedule() dpcore.Schedule { return o.sched }

// Options are the Adam settings with defaults filled in.
func (o *Adam) Options() AdamOptions { return o.opt }

// Rates returns a copy of the per-step learning rates (index 0 is step 1).
func (o *Adam) Rates() []float64 { return append([]float64(nil), o.rates...) }

// Workload always fails with ErrNonlinear: Adam's update is not a linear map
// of the gradient stream. Factorize the mechanism for dpcore.PrefixSum(n)
// instead; Adam then post-processes the privatized gradients.
func (o *Adam) Workload(n int) (dpcore.Workload, error) {
	return dpcore.Workload{}, fmt.Errorf("optim: adam: workload: %w (factorize for the prefix sum; Adam is post-processing)", ErrNonlinear)
}
