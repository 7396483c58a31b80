package optim

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/dpmf-go/dpmf/dpcore"
)

// MomentumOptions are the variants of heavy-ball momentum.
type MomentumOptions struct {
	// Nesterov uses the look-ahead update u_i = g_i + beta m_i in place of
	// m_i (the form PyTorch and Optax use).
	Nesterov bool
	// WeightDecay lambda >= 0 is decoupled weight decay (Loshchilov & Hutter):
	// theta_i = (1 - eta_i lambda) theta_{i-1} - eta_i u_i. The decay never
	// enters the momentum buffer, so the noise still passes through a linear
	// map of G; theta_0 is scaled by prod_k (1 - eta_k lambda).
	WeightDecay float64
}

// heavyBall is the shared core of SGD and Momentum.
type heavyBall struct {
	dim   int
	beta  float64
	opt   MomentumOptions
	sched dpcore.Schedule
	rates []float64
	step  int
	prec  precision
	m32   []float32
	m64   []float64
}

func newHeavyBall(kind string, dim int, beta float64, s dpcore.Schedule, steps int, opt MomentumOptions) (heavyBall, error) {
	if dim <= 0 {
		return heavyBall{}, invalidf("%s: dimension %d must be positive", kind, dim)
	}
	if !(beta >= 0 && beta < 1) {
		return heavyBall{}, invalidf("%s: beta = %v must lie in [0,1)", kind, beta)
	}
	if !(opt.WeightDecay >= 0) || math.IsInf(opt.WeightDecay, 0) {
		return heavyBall{}, invalidf("%s: weight decay %v must be finite and >= 0", kind, opt.WeightDecay)
	}
	rates, err := scheduleRates(s, steps)
	if err != nil {
		return heavyBall{}, fmt.Errorf("%w (%s)", err, kind)
	}
	return heavyBall{dim: dim, beta: beta, opt: opt, sched: s, rates: rates}, nil
}

// buffered reports whether the update needs a momentum buffer: with beta = 0
// it is m_i = g_i, so DP-SGD keeps no O(d) state.
func (h *heavyBall) buffered() bool { return h.beta != 0 }

func (h *heavyBall) setPrecision(p precision) error {
	if h.prec != precUnset && h.prec != p {
		return invalidf("step: optimizer runs in %v, cannot switch to %v", h.prec, p)
	}
	if h.prec == precUnset {
		h.prec = p
		if h.buffered() {
			if p == prec32 {
				h.m32 = make([]float32, h.dim)
			} else {
				h.m64 = make([]float64, h.dim)
			}
		}
	}
	return nil
}

func (h *heavyBall) step32(params, grad []float32) error {
	if err := checkStep(h.dim, h.step, len(h.rates), params, grad); err != nil {
		return err
	}
	if err := h.setPrecision(prec32); err != nil {
		return err
	}
	heavyBallUpdate(params, grad, h.m32, h.beta, h.rates[h.step], h.opt)
	h.step++
	return nil
}

func (h *heavyBall) step64(params, grad []float64) error {
	if err := checkStep(h.dim, h.step, len(h.rates), params, grad); err != nil {
		return err
	}
	if err := h.setPrecision(prec64); err != nil {
		return err
	}
	heavyBallUpdate(params, grad, h.m64, h.beta, h.rates[h.step], h.opt)
	h.step++
	return nil
}

// heavyBallUpdate is one step of SPEC 2: m = beta m + g, then
// theta = (1 - eta lambda) theta - eta u with u = m (or g + beta m for
// Nesterov). m is nil when beta = 0.
func heavyBallUpdate[T float32 | float64](params, grad, m []T, beta, eta float64, opt MomentumOptions) {
	e := T(eta)
	switch {
	case m == nil && opt.WeightDecay == 0:
		for i, g := range grad {
			params[i] -= e * g
		}
	case m == nil:
		decay := T(1 - eta*opt.WeightDecay)
		for i, g := range grad {
			params[i] = decay*params[i] - e*g
		}
	default:
		b := T(beta)
		decay := T(1 - eta*opt.WeightDecay)
		wd := opt.WeightDecay != 0
		m = m[:len(grad)]
		params = params[:len(grad)]
		for i, g := range grad {
			mi := b*m[i] + g
			m[i] = mi
			u := mi
			if opt.Nesterov {
				u = g + b*mi
			}
			p := params[i]
			if wd {
				p *= decay
			}
			params[i] = p - e*u
		}
	}
}

// matrix builds the exact n x n A of the update (rows: steps, columns:
// gradients) by A[i,:] = rho_i A[i-1,:] + eta_i c_i, where c_i is the row of
// u_i in terms of G and rho_i = 1 - eta_i lambda.
func (h *heavyBall) matrix(n int) (*mat.Dense, error) {
	if n <= 0 || n > len(h.rates) {
		return nil, invalidf("matrix: n = %d must lie in [1, %d scheduled steps]", n, len(h.rates))
	}
	a := mat.NewDense(n, n, nil)
	prev := make([]float64, n)
	row := make([]float64, n)
	for i := 0; i < n; i++ {
		eta := h.rates[i]
		rho := 1 - eta*h.opt.WeightDecay
		for j := 0; j <= i; j++ {
			// u_i = sum_j beta^(i-j) g_j, or with Nesterov
			// g_i + sum_j beta^(i-j+1) g_j.
			c := math.Pow(h.beta, float64(i-j))
			if h.opt.Nesterov {
				c *= h.beta
				if j == i {
					c++
				}
			}
			row[j] = rho*prev[j] + eta*c
		}
		a.SetRow(i, row)
		copy(prev, row)
	}
	return a, nil
}

// ThetaZeroFactor returns prod_{k<=i} (1 - eta_k lambda) for i = 1..n, the
// factor that weight decay puts on theta_0: theta_i = f_i theta_0 - (A G)_i.
// It is all ones without weight decay.
func (h *heavyBall) thetaZeroFactor(n int) ([]float64, error) {
	if n <= 0 || n > len(h.rates) {
		return nil, invalidf("theta0 factor: n = %d must lie in [1, %d scheduled steps]", n, len(h.rates))
	}
	f := make([]float64, n)
	p := 1.0
	for i := range f {
		p *= 1 - h.rates[i]*h.opt.WeightDecay
		f[i] = p
	}
	return f, nil
}

func (h *heavyBall) workload(n int) (dpcore.Workload, error) {
	if h.dim <= 0 {
		return dpcore.Workload{}, invalidf("optimizer is not initialized")
	}
	// With beta = 0 Nesterov's look-ahead is g_i itself: plain SGD.
	if h.opt.Nesterov && h.beta != 0 {
		return dpcore.Workload{}, fmt.Errorf("optim: workload: Nesterov momentum: %w (A = M_eta (I + beta M_beta); use Matrix, or factorize for the heavy-ball or prefix-sum workload)", ErrUnsupportedWorkload)
	}
	if h.opt.WeightDecay != 0 {
		return dpcore.Workload{}, fmt.Errorf("optim: workload: weight decay %v: %w (theta_i = f_i theta_0 - (A G)_i; use Matrix and ThetaZeroFactor)", h.opt.WeightDecay, ErrUnsupportedWorkload)
	}
	return heavyBallWorkload(h.beta, h.sched, h.rates, n)
}

// SGD is stochastic gradient descent with a fixed learning-rate schedule:
// theta_i = theta_{i-1} - eta_i g_i. It keeps no per-parameter state.
type SGD struct {
	h heavyBall
}

// NewSGD returns SGD over dim parameters for steps steps with schedule s.
func NewSGD(dim int, s dpcore.Schedule, steps int) (*SGD, error) {
	h, err := newHeavyBall("sgd", dim, 0, s, steps, MomentumOptions{})
	if err != nil {
		return nil, err
	}
	return &SGD{h: h}, nil
}

// Step applies theta -= eta_i grad in place.
func (o *SGD) Step(params, grad []float32) error { return o.h.step32(params, grad) }

// Step64 is Step in float64. An optimizer runs in one precision only.
func (o *SGD) Step64(params, grad []float64) error { return o.h.step64(params, grad) }

// StepIndex is the number of steps taken.
func (o *SGD) StepIndex() int { return o.h.step }

// Steps is the number of scheduled steps.
func (o *SGD) Steps() int { return len(o.h.rates) }

// Schedule is the learning-rate schedule.
func (o *SGD) Schedule() dpcore.Schedule { return o.h.sched }

// Rates returns a copy of the per-step learning rates (index 0 is step 1).
func (o *SGD) Rates() []float64 { return append([]float64(nil), o.h.rates...) }

// Workload returns the prefix sum S(n) when every rate is 1, else
// dpcore.MomentumWorkload(n, 0, schedule); its matrix includes the rates.
func (o *SGD) Workload(n int) (dpcore.Workload, error) { return o.h.workload(n) }

// Matrix returns the dense n x n workload matrix.
func (o *SGD) Matrix(n int) (*mat.Dense, error) { return o.h.matrix(n) }

// Momentum is heavy-ball momentum with a fixed learning-rate schedule
// (SPEC 2, Denisov et al. 2022 Prop. 4.2):
//
//	m_i = beta m_{i-1} + g_i,  theta_i = theta_{i-1} - eta_i m_i,
//
// optionally with Nesterov's look-ahead and decoupled weight decay.
type Momentum struct {
	h heavyBall
}

// NewMomentum returns heavy-ball momentum beta in [0,1) over dim parameters
// for steps steps with schedule s. The momentum buffer starts at zero.
func NewMomentum(dim int, beta float64, s dpcore.Schedule, steps int, opt MomentumOptions) (*Momentum, error) {
	h, err := newHeavyBall("momentum", dim, beta, s, steps, opt)
	if err != nil {
		return nil, err
	}
	return &Momentum{h: h}, nil
}

// Step applies one momentum update in place.
func (o *Momentum) Step(params, grad []float32) error { return o.h.step32(params, grad) }

// Step64 is Step in float64. An optimizer runs in one precision only.
func (o *Momentum) Step64(params, grad []float64) error { return o.h.step64(params, grad) }

// StepIndex is the number of steps taken.
func (o *Momentum) StepIndex() int { return o.h.step }

// Steps is the number of scheduled steps.
func (o *Momentum) Steps() int { return len(o.h.rates) }

// Schedule is the learning-rate schedule.
func (o *Momentum) Schedule() dpcore.Schedule { return o.h.sched }

// Beta is the momentum coefficient.
func (o *Momentum) Beta() float64 { return o.h.beta }

// Options are the Nesterov and weight-decay settings.
func (o *Momentum) Options() MomentumOptions { return o.h.opt }

// Rates returns a copy of the per-step learning rates (index 0 is step 1).
func (o *Momentum) Rates() []float64 { return append([]float64(nil), o.h.rates...) }

// Workload returns dpcore.MomentumWorkload(n, beta, schedule) (the prefix
// sum when beta = 0 and every rate is 1). With Nesterov (beta > 0) or
// weight decay the update is still linear in G but not a workload family of
// mfnoise: the error wraps ErrUnsupportedWorkload and Matrix gives A.
func (o *Momentum) Workload(n int) (dpcore.Workload, error) { return o.h.workload(n) }

// Matrix returns the exact dense n x n matrix A with
// theta_i = f_i theta_0 - (A G)_i for every gradient stream G, f being
// ThetaZeroFactor (all ones without weight decay). With Nesterov,
// A = M_eta (I + beta M_beta).
func (o *Momentum) Matrix(n int) (*mat.Dense, error) { return o.h.matrix(n) }

// ThetaZeroFactor returns f_i = prod_{k<=i} (1 - eta_k lambda), i = 1..n,
// the weight-decay factor on theta_0 (all ones without weight decay).
func (o *Momentum) ThetaZeroFactor(n int) ([]float64, error) { return o.h.thetaZeroFactor(n) }
