package accountant

import (
	"fmt"
	"math"
)

// The multivariate discrete Gaussian mechanism adds independent
// N_Z(0, s^2) noise to every coordinate of an integer-valued query q with
// L2 sensitivity Delta (||q(x) - q(x')||_2 <= Delta for adjacent x, x').
// With noise multiplier sigma = s / Delta it satisfies rho-zCDP with
// rho = 1/(2 sigma^2): in one dimension the Rényi divergence of order a
// between N_Z(m, s^2) and N_Z(m', s^2), m - m' an integer, is at most
// a (m - m')^2 / (2 s^2) (Canonne, Kamath & Steinke 2020, Thm. 4), and
// independent coordinates add their divergences. The
// (eps, delta) guarantee is the conversion of ZCDPEpsilon (CKS 2020,
// Prop. 12): an upper bound, 6-9% more noise than the continuous Gaussian's
// exact curve needs at eps in [0.5, 8] and delta in [1e-6, 1e-5]. The
// exact curve of the discrete mechanism is not used: for more than one
// coordinate it depends on the direction of q(x) - q(x'), not only on
// Delta.

// DiscreteGaussianAccounting names the rule in ledgers.
const DiscreteGaussianAccounting = "discrete-gaussian-zcdp (Canonne, Kamath & Steinke 2020: rho = 1/(2 sigma^2), Thm. 4 per coordinate, converted by Prop. 12)"

// DiscreteGaussianEpsilon returns an upper bound on the eps at delta of the
// multivariate discrete Gaussian mechanism with noise multiplier sigma
// (noise standard deviation parameter over the L2 sensitivity of the
// integer-valued query).
func DiscreteGaussianEpsilon(sigma, delta float64) (float64, error) {
	if err := checkSigma(sigma); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianEpsilon: %w", err)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianEpsilon: %w", err)
	}
	return ZCDPEpsilon(ZCDPRho(sigma), delta)
}

// DiscreteGaussianSigma returns the smallest noise multiplier (to a
// relative 1e-12, rounded up) at which DiscreteGaussianEpsilon is at most
// eps.
func DiscreteGaussianSigma(eps, delta float64) (float64, error) {
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigma: %w", err)
	}
	if eps == 0 {
		return 0, fmt.Errorf("DiscreteGaussianSigma: eps = 0: %w", ErrInfeasible)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigma: %w", err)
	}
	f := func(s float64) float64 { e, _ := ZCDPEpsilon(ZCDPRho(s), delta); return e }
	lo, hi := 1.0, 1.0
	for f(hi) > eps {
		lo, hi = hi, 2*hi
		if hi > 1e12 {
			return 0, fmt.Errorf("DiscreteGaussianSigma: eps = %v, delta = %v: %w", eps, delta, ErrInfeasible)
		}
	}
	for lo == hi || f(lo) <= eps {
		lo /= 2
		if lo < 1e-12 {
			return hi, nil
		}
	}
	for i := 0; i < 200 && hi-lo > 1e-13*hi; i++ {
		mid := math.Sqrt(lo * hi)
		if f(mid) > eps {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}
