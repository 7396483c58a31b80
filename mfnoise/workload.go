package mfnoise

import (
	"github.com/dpmf-go/dpmf/dpcore"
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("mfnoise", format, args...)
}

// The workload and its learning-rate schedule are defined in package
// dpcore, shared with package optim; these aliases keep the mfnoise names.

// Schedule is a learning-rate schedule fixed before training; see
// dpcore.Schedule.
type Schedule = dpcore.Schedule

// WorkloadKind names the family of a workload; see dpcore.WorkloadKind.
type WorkloadKind = dpcore.WorkloadKind

// Workload is the lower-triangular linear map A that an optimizer applies
// to the gradient stream (SPEC 2); see dpcore.Workload.
type Workload = dpcore.Workload

const (
	// PrefixSumKind is S: plain SGD with constant rate 1.
	PrefixSumKind = dpcore.PrefixSumKind
	// MomentumKind is M = M_eta M_beta (Denisov et al. Prop. 4.2).
	MomentumKind = dpcore.MomentumKind
)

// ConstantSchedule is dpcore.ConstantSchedule.
func ConstantSchedule(eta float64) Schedule { return dpcore.ConstantSchedule(eta) }

// CooldownSchedule is dpcore.CooldownSchedule.
func CooldownSchedule(n int, frac, final float64) Schedule {
	return dpcore.CooldownSchedule(n, frac, final)
}

// PrefixSum is dpcore.PrefixSum.
func PrefixSum(n int) (Workload, error) { return dpcore.PrefixSum(n) }

// MomentumWorkload is dpcore.MomentumWorkload.
func MomentumWorkload(n int, beta float64, s Schedule) (Workload, error) {
	return dpcore.MomentumWorkload(n, beta, s)
}
