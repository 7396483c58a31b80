package accountant

import (
	"fmt"
	"math"
)

// The multivariate discrete Gaussian mechanism adds independent
// N_Z(0, s^2) noise to every coordinate of an integer-valued query q with
// L2 sensitivity Delta (||q(x) - q(x')||_2 <= Delta for adjacent x, x',
// the difference an integer vector mu); its noise multiplier is
// sigma = s / Delta. Two bounds hold for every such mu, whatever its
// direction, and the smaller is used:
//
//   - zCDP (Canonne, Kamath & Steinke 2020, Thm. 4 per coordinate, adding
//     over coordinates): rho = 1/(2 sigma^2), converted by ZCDPEpsilon. It
//     needs 6-9% more noise than the continuous Gaussian at eps in
//     [0.5, 8], delta in [1e-6, 1e-5].
//   - Smoothing: N_Z(mu, s^2) is, to a factor e^(+-eta) on every point,
//     the post-processing K(N(mu, s'^2)) of a continuous Gaussian with
//     s'^2 = s^2 - tau^2, where K(y) draws the integer x with probability
//     phi_tau(x - y) / theta(y), theta(y) = sum_j phi_tau(j - y) (a Markov
//     kernel that commutes with integer shifts). With K applied, the
//     output has probability phi_s(x - mu) / theta(.) averaged over y,
//     since phi_s' * phi_tau = phi_s; by Poisson summation theta(y) and
//     sum_j phi_s(j) lie in [1 - e_tau, 1 + e_tau], e_tau = 2 sum_k>=1
//     e^(-2 pi^2 tau^2 k^2), so eta <= log((1 + e_tau)/(1 - e_tau)). Over n
//     independent coordinates the factor is e^(+-n eta), and the release
//     is (eps + 2 n eta, e^(n eta) delta)-DP whenever the continuous
//     Gaussian mechanism with sensitivity Delta and noise multiplier
//     s'/Delta is (eps, delta)-DP (its exact curve, GaussianEpsilon). At
//     tau = 4, e_tau < 1.4e-137 and n eta < 1e-116 for any n < 2^64: the
//     bound is the continuous Gaussian's at a multiplier smaller by a
//     relative (tau/s)^2/2, 1e-11 for the service's s >= 2^20 sigma.
//
// The privacy loss of the mechanism for one integer shift mu is exactly
// sum_i (mu_i^2 - 2 mu_i x_i)/(2 s^2) with x_i ~ N_Z(0, s^2): the
// composition over coordinates of one-dimensional discrete Gaussian
// losses, on the lattice of multiples of 1/s^2. DiscreteGaussianDelta
// composes it exactly (for small s, as a check of the bounds; at the
// service's s it is the continuous Gaussian's to about 1e-11).

// DiscreteGaussianAccounting names the rule in ledgers.
const DiscreteGaussianAccounting = "discrete-gaussian (the smaller of the continuous Gaussian's exact curve (Balle & Wang 2018) at the smoothed noise multiplier sqrt(s^2 - 16)/Delta, by post-processing with a discrete Gaussian kernel of width 4, and zCDP: Canonne, Kamath & Steinke 2020, Thm. 4, Prop. 12)"

// smoothingTau is tau of the smoothing bound, and smoothingSlack bounds
// 2 n eta for any n < 2^64 (2^65 * 2 * 2 e^(-2 pi^2 16) = 2e-118).
const (
	smoothingTau   = 4.0
	smoothingSlack = 1e-116
)

// roundUp is 1 + 2^-50: a relative margin above float64 rounding.
const roundUp = 1 + 0x1p-50

// smoothedMultiplier is the continuous Gaussian noise multiplier that
// dominates the discrete Gaussian with multiplier sigma and integer
// sensitivity sens (s = sigma sens), rounded down; ok is false below
// s = 2 tau, where the bound is not useful.
func smoothedMultiplier(sigma, sens float64) (float64, bool) {
	s := sigma * sens
	if !(s >= 2*smoothingTau) || isInf(s) {
		return 0, false
	}
	r := smoothingTau / s
	return sigma * math.Sqrt(1-r*r) / roundUp, true
}

func checkSens(sens float64) error {
	if !(sens >= 1) || isInf(sens) {
		return invalidf("integer sensitivity %v, want finite and >= 1 (a nonzero integer shift has norm >= 1)", sens)
	}
	return nil
}

// DiscreteGaussianEpsilon returns an upper bound on the eps at delta of the
// multivariate discrete Gaussian mechanism with noise multiplier sigma on
// an integer-valued query of L2 sensitivity sens (noise N_Z(0, (sigma
// sens)^2) per coordinate), valid for every integer shift of norm at most
// sens: the smaller of the smoothing and zCDP bounds above.
func DiscreteGaussianEpsilon(sigma, delta, sens float64) (float64, error) {
	if err := checkSigma(sigma); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianEpsilon: %w", err)
	}
	if err := checkSens(sens); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianEpsilon: %w", err)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianEpsilon: %w", err)
	}
	return discreteGaussianEpsilon(sigma, sens, delta), nil
}

func discreteGaussianEpsilon(sigma, sens, delta float64) float64 {
	eps, _ := ZCDPEpsilon(ZCDPRho(sigma), delta)
	if sp, ok := smoothedMultiplier(sigma, sens); ok {
		// e^(n eta) delta_c <= delta: delta_c <= delta / roundUp.
		e := gaussianEpsilon(sp, delta/roundUp)
		eps = math.Min(eps, e*roundUp+smoothingSlack)
	}
	return eps
}

// DiscreteGaussianSigma returns the smallest noise multiplier (to a
// relative 1e-12, rounded up) at which DiscreteGaussianEpsilon(sigma,
// delta, sens) is at most eps.
func DiscreteGaussianSigma(eps, delta, sens float64) (float64, error) {
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigma: %w", err)
	}
	if eps == 0 {
		return 0, fmt.Errorf("DiscreteGaussianSigma: eps = 0: %w", ErrInfeasible)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigma: %w", err)
	}
	if err := checkSens(sens); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigma: %w", err)
	}
	return smallestSigma("DiscreteGaussianSigma", eps, delta, func(s float64) float64 { return discreteGaussianEpsilon(s, sens, delta) })
}

// smallestSigma returns the smallest noise multiplier s (to a relative
// 1e-13, rounded up) at which f(s), an epsilon that falls as s grows, is at
// most eps: doubling brackets it, then bisection on the log scale. It
// refuses (ErrInfeasible) a target no multiplier up to 1e12 meets.
func smallestSigma(name string, eps, delta float64, f func(s float64) float64) (float64, error) {
	lo, hi := 1.0, 1.0
	for f(hi) > eps {
		lo, hi = hi, 2*hi
		if hi > 1e12 {
			return 0, fmt.Errorf("%s: eps = %v, delta = %v: %w", name, eps, delta, ErrInfeasible)
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

// maxDiscreteSupport bounds the lattice DiscreteGaussianDelta convolves on.
const maxDiscreteSupport = 1 << 24

// DiscreteGaussianDelta returns the exact delta(eps) of the discrete
// Gaussian mechanism with noise N_Z(0, s^2) on every coordinate under the
// integer shift mu (the hockey-stick divergence of the products of
// N_Z(0, s^2) and N_Z(mu_i, s^2), the same both ways by symmetry). The
// privacy loss is (||mu||^2 - 2 T)/(2 s^2) with T = sum_i mu_i x_i: the
// per-coordinate losses are composed exactly by convolving the laws of
// mu_i x_i on the integers. Each x_i is summed over |x| <= 13 s + 2 (the
// mass left out is below 1e-36 of the total). It refuses, with
// ErrUnsupported, a T of more than 2^24 values: it is a check for small
// s, the bounds (DiscreteGaussianEpsilon) are what the service uses.
func DiscreteGaussianDelta(s float64, mu []int64, eps float64) (float64, error) {
	if err := checkSigma(s); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianDelta: %w", err)
	}
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianDelta: %w", err)
	}
	k := int64(math.Ceil(13*s)) + 2
	var width, m2 float64
	for _, m := range mu {
		width += math.Abs(float64(m)) * float64(2*k)
		m2 += float64(m) * float64(m)
	}
	if width+1 > maxDiscreteSupport || m2 > 1<<53 {
		return 0, fmt.Errorf("DiscreteGaussianDelta: s = %v, shift of L1 norm %v: %w (a lattice of %.3g points)", s, width/float64(2*k), ErrUnsupported, width+1)
	}
	if m2 == 0 {
		return 0, nil
	}
	// p[j] = P(x = j - k), unnormalized.
	p := make([]float64, 2*k+1)
	z := 0.0
	for j := range p {
		x := float64(int64(j) - k)
		p[j] = math.Exp(-x * x / (2 * s * s))
		z += p[j]
	}
	for j := range p {
		p[j] /= z
	}
	// law[t - off] = P(T = t).
	law, off := []float64{1}, int64(0)
	for _, m := range mu {
		if m == 0 {
			continue
		}
		a := m
		if a < 0 {
			a = -a // x and -x have the same law
		}
		next := make([]float64, int64(len(law))+2*k*a)
		for i, w := range law {
			if w == 0 {
				continue
			}
			for j, q := range p {
				next[int64(i)+int64(j)*a] += w * q
			}
		}
		law, off = next, off-k*a
	}
	// delta = sum_t P(T = t) (1 - e^(eps - L(t)))_+, L(t) = (m2 - 2t)/(2 s^2).
	var delta float64
	for i, w := range law {
		l := (m2 - 2*float64(int64(i)+off)) / (2 * s * s)
		if l > eps {
			delta += -w * math.Expm1(eps-l)
		}
	}
	return math.Max(0, math.Min(1, delta)), nil
}
