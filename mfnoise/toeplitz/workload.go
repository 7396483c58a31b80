package toeplitz

import (
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
)

// workloadRates returns the learning rates of a momentum workload (nil for
// the prefix sum) after validating w.
func workloadRates(w dpcore.Workload) ([]float64, error) {
	switch w.Kind {
	case dpcore.PrefixSumKind:
		if w.N <= 0 {
			return nil, guard.Invalidf("prefix sum: n = %d must be positive", w.N)
		}
		return nil, nil
	case dpcore.MomentumKind:
		if err := w.Validate(); err != nil {
			return nil, err
		}
		return w.Schedule.Rates(w.N)
	}
	return nil, guard.Invalidf("workload kind %q", w.Kind)
}

// applyWorkloadVec overwrites y with A y: for momentum A = S diag(eta)
// M_beta (SPEC 2), for the prefix sum A = S.
func applyWorkloadVec(w dpcore.Workload, eta, y []float64) {
	if w.Kind == dpcore.MomentumKind {
		for i := 1; i < len(y); i++ {
			y[i] += w.Momentum * y[i-1]
		}
		for i := range y {
			y[i] *= eta[i]
		}
	}
	for i := 1; i < len(y); i++ {
		y[i] += y[i-1]
	}
}

// constantRates reports whether every rate is the same (A is then Toeplitz).
func constantRates(eta []float64) bool {
	for _, e := range eta {
		if e != eta[0] {
			return false
		}
	}
	return true
}

// ProxyWorkload is the Toeplitz workload the optimizers optimize for in
// place of w: w itself, or under a time-varying schedule (cooldown) the
// same momentum at a constant rate, since A must be Toeplitz (the
// mechanism still serves, and is scored on, w itself).
func ProxyWorkload(w dpcore.Workload) (dpcore.Workload, error) {
	eta, err := workloadRates(w)
	if err != nil {
		return dpcore.Workload{}, err
	}
	if eta != nil && !constantRates(eta) {
		return dpcore.Workload{Kind: dpcore.MomentumKind, N: w.N, Momentum: w.Momentum, Schedule: dpcore.ConstantSchedule(1)}, nil
	}
	return w, nil
}
