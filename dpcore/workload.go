package dpcore

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

func invalidf(format string, args ...any) error {
	return Invalid("dpcore", format, args...)
}

// Schedule describes a learning-rate schedule fixed before training, as plain
// data so it can be stored with a factorization and shared by packages optim
// and mfnoise.
// The zero value is the constant rate 1.
//
// Rates are built in this order: Explicit (if set) replaces everything else;
// otherwise Base (1 if zero), multiplied by StepDecayFactor at each step in
// StepDecayAt, then linear warmup over the first WarmupSteps steps, then the
// linear cooldown over the last CooldownSteps steps.
type Schedule struct {
	// Base is the peak learning rate; 0 means 1.
	Base float64 `msgpack:"base" json:"base,omitempty"`
	// WarmupSteps ramps the rate linearly from Base/WarmupSteps up to Base
	// over the first WarmupSteps steps.
	WarmupSteps int `msgpack:"warmup_steps" json:"warmup_steps,omitempty"`
	// CooldownSteps c: the last c rates run linearly from the current rate
	// down to CooldownFinal times it, both ends included (SPEC 2).
	CooldownSteps int `msgpack:"cooldown_steps" json:"cooldown_steps,omitempty"`
	// CooldownFinal is the factor reached at the last step; 0 means 0.05,
	// the papers' choice.
	CooldownFinal float64 `msgpack:"cooldown_final" json:"cooldown_final,omitempty"`
	// StepDecayAt lists 1-based steps from which the rate is multiplied by
	// StepDecayFactor (cumulatively).
	StepDecayAt     []int   `msgpack:"step_decay_at" json:"step_decay_at,omitempty"`
	StepDecayFactor float64 `msgpack:"step_decay_factor" json:"step_decay_factor,omitempty"`
	// Explicit gives every step's rate; its length must be at least n.
	Explicit []float64 `msgpack:"explicit" json:"explicit,omitempty"`
}

// ConstantSchedule is the constant rate eta.
func ConstantSchedule(eta float64) Schedule { return Schedule{Base: eta} }

// CooldownSchedule is the papers' schedule: rate 1 for the first n-c steps,
// then linearly from 1 down to final over the last c steps, both ends
// included. c = round(frac*n).
func CooldownSchedule(n int, frac, final float64) Schedule {
	return Schedule{Base: 1, CooldownSteps: int(math.Round(frac * float64(n))), CooldownFinal: final}
}

// Rates returns the n per-step learning rates eta_1..eta_n (index 0 is step 1).
func (s Schedule) Rates(n int) ([]float64, error) {
	if n <= 0 {
		return nil, invalidf("schedule: n = %d must be positive", n)
	}
	if s.Explicit != nil {
		if len(s.Explicit) < n {
			return nil, invalidf("schedule: explicit rates have %d entries, need %d", len(s.Explicit), n)
		}
		r := append([]float64(nil), s.Explicit[:n]...)
		for i, v := range r {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, invalidf("schedule: explicit rate %d is %v", i+1, v)
			}
		}
		return r, nil
	}
	base := s.Base
	if base == 0 {
		base = 1
	}
	if math.IsNaN(base) || math.IsInf(base, 0) || base < 0 {
		return nil, invalidf("schedule: base rate %v", base)
	}
	if s.WarmupSteps < 0 || s.CooldownSteps < 0 || s.WarmupSteps > n || s.CooldownSteps > n {
		return nil, invalidf("schedule: warmup %d and cooldown %d steps must lie in [0, n=%d]", s.WarmupSteps, s.CooldownSteps, n)
	}
	final := s.CooldownFinal
	if final == 0 {
		final = 0.05
	}
	if final < 0 || math.IsNaN(final) {
		return nil, invalidf("schedule: cooldown final factor %v", final)
	}
	r := make([]float64, n)
	for i := range r {
		r[i] = base
	}
	if len(s.StepDecayAt) > 0 {
		if s.StepDecayFactor <= 0 || math.IsNaN(s.StepDecayFactor) {
			return nil, invalidf("schedule: step decay factor %v", s.StepDecayFactor)
		}
		for _, at := range s.StepDecayAt {
			if at < 1 {
				return nil, invalidf("schedule: step decay at step %d", at)
			}
			for i := at - 1; i < n; i++ {
				r[i] *= s.StepDecayFactor
			}
		}
	}
	for i := 0; i < s.WarmupSteps; i++ {
		r[i] *= float64(i+1) / float64(s.WarmupSteps)
	}
	if c := s.CooldownSteps; c > 0 {
		for j := 0; j < c; j++ {
			f := 1.0
			if c > 1 {
				f = 1 - (1-final)*float64(j)/float64(c-1)
			} else {
				f = final
			}
			r[n-c+j] *= f
		}
	}
	return r, nil
}

// WorkloadKind names the family of a workload.
type WorkloadKind string

const (
	// PrefixSumKind is S: plain SGD with constant rate 1.
	PrefixSumKind WorkloadKind = "prefix"
	// MomentumKind is M = M_eta M_beta (Denisov et al. Prop. 4.2).
	MomentumKind WorkloadKind = "momentum"
)

// Workload is the lower-triangular n x n linear map A that an optimizer
// applies to the gradient stream (SPEC 2). It is plain data: the matrix is
// built on demand by Matrix.
type Workload struct {
	Kind WorkloadKind `msgpack:"kind" json:"kind"`
	N    int          `msgpack:"n" json:"n"`
	// Momentum is beta for MomentumKind (0 is SGD with a schedule).
	Momentum float64 `msgpack:"momentum" json:"momentum,omitempty"`
	// Schedule gives the learning rates for MomentumKind.
	Schedule Schedule `msgpack:"schedule" json:"schedule"`
}

// PrefixSum returns the prefix-sum workload S(n).
func PrefixSum(n int) (Workload, error) {
	if n <= 0 {
		return Workload{}, invalidf("prefix sum: n = %d must be positive", n)
	}
	return Workload{Kind: PrefixSumKind, N: n}, nil
}

// MomentumWorkload returns M = M_eta M_beta for heavy-ball momentum beta in
// [0,1) and the learning-rate schedule s: m_i = beta m_{i-1} + g_i,
// theta_i = theta_{i-1} - eta_i m_i.
func MomentumWorkload(n int, beta float64, s Schedule) (Workload, error) {
	if n <= 0 {
		return Workload{}, invalidf("momentum: n = %d must be positive", n)
	}
	if !(beta >= 0 && beta < 1) {
		return Workload{}, invalidf("momentum: beta = %v must lie in [0,1)", beta)
	}
	if _, err := s.Rates(n); err != nil {
		return Workload{}, err
	}
	return Workload{Kind: MomentumKind, N: n, Momentum: beta, Schedule: s}, nil
}

// Validate reports whether w describes a buildable workload.
func (w Workload) Validate() error {
	switch w.Kind {
	case PrefixSumKind:
		_, err := PrefixSum(w.N)
		return err
	case MomentumKind:
		_, err := MomentumWorkload(w.N, w.Momentum, w.Schedule)
		return err
	}
	return invalidf("workload kind %q", w.Kind)
}

// WithN returns the same workload family over n steps (used by stamping,
// which builds a mechanism for n/s steps).
func (w Workload) WithN(n int) Workload {
	w.N = n
	return w
}

// String names the workload, e.g. "prefix(n=2000)".
func (w Workload) String() string {
	if w.Kind == MomentumKind {
		return fmt.Sprintf("momentum(n=%d,beta=%g)", w.N, w.Momentum)
	}
	return fmt.Sprintf("%s(n=%d)", w.Kind, w.N)
}

// Matrix builds the dense n x n matrix A.
//
// It is refused above DenseStepLimit steps with the memory it would need.
func (w Workload) Matrix() (*mat.Dense, error) { return w.MatrixUpTo(DenseStepLimit) }

// MatrixUpTo is Matrix with the step limit maxN instead of DenseStepLimit,
// for a method that holds A and little else (the banded optimizer, whose
// other memory is O(n bands)); the caller checks the memory.
func (w Workload) MatrixUpTo(maxN int) (*mat.Dense, error) {
	if w.N > maxN {
		return nil, invalidf("workload %s: n = %d steps needs a dense n x n matrix of %s; the limit is n = %d", w.Kind, w.N, HumanBytes(8*float64(w.N)*float64(w.N)), maxN)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	n := w.N
	a := mat.NewDense(n, n, nil)
	if w.Kind == PrefixSumKind {
		for i := 0; i < n; i++ {
			for j := 0; j <= i; j++ {
				a.Set(i, j, 1)
			}
		}
		return a, nil
	}
	eta, _ := w.Schedule.Rates(n)
	// A[i,j] = sum_{l=j..i} eta_l beta^(l-j): the rate-weighted momentum
	// buffer contributions; computed by the recurrence over i.
	for j := 0; j < n; j++ {
		pow := 1.0
		acc := 0.0
		for i := j; i < n; i++ {
			acc += eta[i] * pow
			a.Set(i, j, acc)
			pow *= w.Momentum
		}
	}
	return a, nil
}

// DenseStepLimit is the largest number of steps for which dense n x n
// matrices (workloads, factorizations) are built: 8192 steps is 512 MiB
// per matrix.
const DenseStepLimit = 8192

// StructuredStepLimit is the largest number of steps for which structured
// (O(n) memory) mechanisms are scored: their per-step arrays cost 8 n
// bytes each (64 MiB at this limit).
const StructuredStepLimit = 1 << 23

// HumanBytes writes a byte count in binary units (KiB to TiB), for the
// refusals that state the memory a request would need.
func HumanBytes(b float64) string {
	switch {
	case b >= 1<<40:
		return fmt.Sprintf("%.1f TiB", b/(1<<40))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", b/(1<<10))
}
