package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
)

// ErrUnsupportedWorkload is wrapped by Workload when the optimizer's update
// is linear in the gradient stream but is not one of the mfnoise workload
// families (Nesterov momentum, weight decay). Matrix still gives its A.
var ErrUnsupportedWorkload = errors.New("update has no mfnoise workload")

// ErrNonlinear is wrapped by Workload and Matrix of optimizers whose update
// is not linear in the gradient stream (Adam, AdamW).
var ErrNonlinear = errors.New("update is not linear in the gradients")

// Optimizer updates a parameter vector in place from one (noisy, averaged)
// gradient per step. Implementations are not safe for concurrent use.
type Optimizer interface {
	// Step applies one update to params in place. It returns an error and
	// leaves params and the optimizer state untouched when grad holds a NaN
	// or an infinity, when the lengths differ from the dimension, or when
	// the schedule's steps are used up.
	Step(params, grad []float32) error
	// StepIndex is the number of steps taken so far (0 before the first).
	StepIndex() int
	// Workload is the workload A over the first n steps: for every gradient
	// stream G, theta_i = theta_0 - (A G)_i. The error wraps
	// ErrUnsupportedWorkload when the update is linear but not an mfnoise
	// workload family, and ErrNonlinear when it is not linear (Adam).
	Workload(n int) (dpcore.Workload, error)
	// MarshalBinary saves the complete state; UnmarshalBinary restores it.
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("optim", format, args...)
}

// precision records which float type an optimizer's buffers hold.
type precision uint8

const (
	precUnset precision = iota
	prec32
	prec64
)

func (p precision) String() string {
	switch p {
	case prec32:
		return "float32"
	case prec64:
		return "float64"
	}
	return "unset"
}

// checkStep validates one step's arguments before anything is written.
func checkStep[T float32 | float64](dim, step, steps int, params, grad []T) error {
	if dim <= 0 {
		return invalidf("optimizer is not initialized (use a New function or UnmarshalBinary)")
	}
	if len(params) != dim || len(grad) != dim {
		return invalidf("step: len(params) = %d, len(grad) = %d, want dimension %d", len(params), len(grad), dim)
	}
	if step >= steps {
		return invalidf("step: all %d scheduled steps are used up", steps)
	}
	for i, g := range grad {
		// NaN and ±Inf are the values v with v-v != 0.
		if g-g != 0 {
			return invalidf("step %d: grad[%d] = %v", step+1, i, g)
		}
	}
	return nil
}

// scheduleRates validates the schedule over steps and returns its rates.
func scheduleRates(s dpcore.Schedule, steps int) ([]float64, error) {
	if steps <= 0 {
		return nil, invalidf("steps = %d must be positive", steps)
	}
	r, err := s.Rates(steps)
	if err != nil {
		return nil, fmt.Errorf("optim: schedule over %d steps: %w", steps, err)
	}
	return r, nil
}

// workloadSchedule is the schedule that gives the first n of the optimizer's
// rates: the user's own when n covers every step (so stored metadata keeps
// its shape), else the explicit prefix, because cooldown and the other
// relative rules depend on n.
func workloadSchedule(s dpcore.Schedule, rates []float64, n int) (dpcore.Schedule, error) {
	if n <= 0 || n > len(rates) {
		return dpcore.Schedule{}, invalidf("workload: n = %d must lie in [1, %d scheduled steps]", n, len(rates))
	}
	if n == len(rates) {
		return s, nil
	}
	return dpcore.Schedule{Explicit: append([]float64(nil), rates[:n]...)}, nil
}

// heavyBallWorkload is the mfnoise workload of heavy-ball momentum beta
// (beta = 0 is SGD) with the given rates: the prefix sum when beta = 0 and
// every rate is exactly 1.
func heavyBallWorkload(beta float64, s dpcore.Schedule, rates []float64, n int) (dpcore.Workload, error) {
	ws, err := workloadSchedule(s, rates, n)
	if err != nil {
		return dpcore.Workload{}, err
	}
	if beta == 0 {
		ones := true
		for _, r := range rates[:n] {
			if r != 1 {
				ones = false
				break
			}
		}
		if ones {
			return dpcore.PrefixSum(n)
		}
	}
	w, err := dpcore.MomentumWorkload(n, beta, ws)
	if err != nil {
		return dpcore.Workload{}, fmt.Errorf("optim: workload: %w", err)
	}
	return w, nil
}

// Constant is the constant learning rate eta.
func Constant(eta float64) dpcore.Schedule { return dpcore.Schedule{Base: eta} }

// CooldownFraction is the papers' schedule (SPEC 2): rate base, then a linear
// cooldown to 0.05*base over the last frac of the n steps (frac = 0.25 in the
// multi-epoch paper).
func CooldownFraction(base float64, n int, frac float64) dpcore.Schedule {
	c := 0
	if frac > 0 && !math.IsNaN(frac) {
		c = int(math.Round(frac * float64(n)))
	}
	return dpcore.Schedule{Base: base, CooldownSteps: c, CooldownFinal: 0.05}
}

// CooldownLast is rate base, then a linear cooldown to 0.05*base over the
// last c steps (c = 500 or 512 in the banded-MF paper).
func CooldownLast(base float64, c int) dpcore.Schedule {
	return dpcore.Schedule{Base: base, CooldownSteps: c, CooldownFinal: 0.05}
}

// StepDecay multiplies the rate base by factor from each of the 1-based steps
// at, cumulatively.
func StepDecay(base, factor float64, at ...int) dpcore.Schedule {
	return dpcore.Schedule{Base: base, StepDecayFactor: factor, StepDecayAt: append([]int(nil), at...)}
}

// Explicit uses rates[i] as the rate of step i+1.
func Explicit(rates []float64) dpcore.Schedule {
	return dpcore.Schedule{Explicit: append([]float64(nil), rates...)}
}

var (
	_ Optimizer = (*SGD)(nil)
	_ Optimizer = (*Momentum)(nil)
	_ Optimizer = (*Adam)(nil)
)
